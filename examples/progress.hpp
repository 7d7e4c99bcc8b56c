#pragma once
// What the examples that run long (07, 08, 09) print about their progress besides their metrics.
#include <array>
#include <cstddef>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace shardwise::examples {

// "12:05": minutes and seconds, for the time a run has left.
inline std::string duration(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%ld:%02ld", static_cast<long>(seconds) / 60, static_cast<long>(seconds) % 60);
  return text;
}

// A progress line's rate: what was done since the previous line, per second of the time that counts,
// as nanoGPT's iteration time is; a mean since the start (which a run's last line gives) would hide a
// slowdown. 0 where no time counted since the previous line.
class rate_since_last_line {
 public:
  // `done` and `seconds` so far; the rate since the previous call.
  double operator()(double done, double seconds) {
    const double rate = seconds > seconds_ ? (done - done_) / (seconds - seconds_) : 0;
    done_ = done;
    seconds_ = seconds;
    return rate;
  }

 private:
  double done_ = 0, seconds_ = 0;
};

// A loss curve as the training examples' --json gives it: rows of [step, tokens or samples trained by
// then, loss].
using loss_curve = std::vector<std::array<double, 3>>;

// `, "name": [[step, trained, loss], ...]`: a field of the --json object after its first.
inline void write_curve(std::ostream& out, std::string_view name, const loss_curve& curve) {
  out << ", \"" << name << "\": [";
  for (std::size_t i = 0; i < curve.size(); ++i)
    out << (i ? ", " : "") << "[" << curve[i][0] << ", " << curve[i][1] << ", " << curve[i][2] << "]";
  out << "]";
}

}  // namespace shardwise::examples
