#pragma once
// --log FILE of the training examples (07, 09): one JSON object per step, written and flushed as the run
// goes, so that a run that fails or is killed keeps every step it finished. A resumed run drops the
// lines after its checkpoint's step, which it trains again, and appends: a run stopped and resumed any
// number of times leaves each step's line once, as TensorBoard's purge_step leaves its events.
//
//   {"step": 11, "tokens": 1408, "loss": 5.1624381439346445, "val_loss": null, "grad_norm": 0.98448966…
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "options.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::examples {

class metrics_log {
 public:
  // No log: write does nothing.
  metrics_log() = default;

  // The log at `path` of a run that starts after `resumed_step` (0 for a fresh run, which empties it).
  metrics_log(const std::filesystem::path& path, long resumed_step) : path_(path), resumed_step_(resumed_step) {
    std::vector<std::string> kept;
    {
      std::ifstream in(path, std::ios::binary);
      for (std::string line; std::getline(in, line);) {
        // A line a kill cut short has no end.
        if (!in.eof() && step_of(line) <= resumed_step) kept.push_back(line);
        else
          ++dropped_;
      }
    }
    // The kept lines replace the log whole, or not at all.
    const std::filesystem::path written = path.string() + ".partial";
    {
      std::ofstream out(written, std::ios::binary | std::ios::trunc);
      for (const auto& line : kept) out << line << '\n';
      if (!out.flush())
        throw argument_error(0, "--log", "cannot write " + written.string() + ": " + std::strerror(errno));
    }
    std::filesystem::rename(written, path);
    out_.open(path, std::ios::binary | std::ios::app);
  }

  // What the log dropped of the file it found, said as a note ("" for nothing): the lines of the steps
  // after the checkpoint's, or all of an earlier run's where this one starts afresh.
  [[nodiscard]] std::string note() const {
    if (dropped_ == 0) return "";
    const std::string lines = std::to_string(dropped_) + (dropped_ == 1 ? " line" : " lines");
    return resumed_step_ == 0
               ? "note: " + path_.string() + " held " + lines + " of an earlier run; this run's log replaces them"
               : "note: " + path_.string() + " held " + lines + " after step " + std::to_string(resumed_step_) +
                     ", which this run trains again; they are dropped";
  }

  // The line of `step`: its fields in the order given, a value that is not a number (a diverged loss) as
  // null.
  void write(long step, std::initializer_list<std::pair<std::string_view, double>> fields) {
    if (!out_.is_open()) return;
    out_ << "{\"step\": " << step;
    for (const auto& [name, value] : fields) {
      out_ << ", \"" << name << "\": " << (std::isfinite(value) ? number_text(value) : "null");
    }
    out_ << "}\n" << std::flush;
  }

 private:
  // A line's step, or a step after every other where it has none.
  static long step_of(const std::string& line) {
    long step = 0;
    return std::sscanf(line.c_str(), "{\"step\": %ld", &step) == 1 ? step : std::numeric_limits<long>::max();
  }

  std::filesystem::path path_;
  long resumed_step_ = 0, dropped_ = 0;
  std::ofstream out_;
};

}  // namespace shardwise::examples
