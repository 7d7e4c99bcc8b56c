#pragma once
// A record of what ran when, written as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev)
// and chrome://tracing open: one process per simulated GPU with one track (thread) per stream, and
// one "network" process with a track per link. Every interval is a complete event ("ph":"X") with
// ts and dur in microseconds of virtual time. Thread-safe: the ranks of a run record into one.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/core/error.hpp"

namespace shardwise::sim {

struct track {
  std::int64_t process = 0;
  std::int64_t thread = 0;
  friend auto operator<=>(const track&, const track&) = default;
};

class timeline {
 public:
  // The process of link tracks: after any GPU's.
  static constexpr std::int64_t network_process = 1 << 30;

  void name_process(std::int64_t process, std::string name) {
    std::lock_guard lock(mutex_);
    process_names_[process] = std::move(name);
  }
  void name_track(track t, std::string name) {
    std::lock_guard lock(mutex_);
    track_names_[t] = std::move(name);
  }
  // An interval [start, start + duration) in seconds; `details` become the event's args.
  void add(track t, std::string name, double start, double duration,
           std::vector<std::pair<std::string, std::string>> details = {}) {
    std::lock_guard lock(mutex_);
    events_.push_back({t, std::move(name), start, duration, std::move(details)});
  }
  [[nodiscard]] bool has_track(track t) const {
    std::lock_guard lock(mutex_);
    return track_names_.contains(t);
  }
  [[nodiscard]] std::size_t size() const {
    std::lock_guard lock(mutex_);
    return events_.size();
  }

  [[nodiscard]] std::string chrome_trace_json() const {
    std::lock_guard lock(mutex_);
    std::ostringstream out;
    out.precision(17);
    out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
    const char* separator = "\n";
    for (const auto& [process, name] : process_names_) {
      out << separator << R"({"ph":"M","name":"process_name","pid":)" << process << R"(,"args":{"name":)"
          << quoted(name) << "}}";
      separator = ",\n";
    }
    for (const auto& [t, name] : track_names_) {
      out << separator << R"({"ph":"M","name":"thread_name","pid":)" << t.process << ",\"tid\":" << t.thread
          << R"(,"args":{"name":)" << quoted(name) << "}}";
      separator = ",\n";
    }
    for (const auto& e : events_) {
      out << separator << R"({"ph":"X","name":)" << quoted(e.name) << ",\"pid\":" << e.where.process
          << ",\"tid\":" << e.where.thread << ",\"ts\":" << e.start * 1e6 << ",\"dur\":" << e.duration * 1e6
          << ",\"args\":{";
      const char* comma = "";
      for (const auto& [key, value] : e.details) {
        out << comma << quoted(key) << ':' << quoted(value);
        comma = ",";
      }
      out << "}}";
      separator = ",\n";
    }
    out << "\n]}\n";
    return out.str();
  }

  void write_chrome_trace(const std::string& path) const {
    errno = 0;
    std::ofstream file(path);
    file << chrome_trace_json();
    file.close();
    if (!file)
      throw argument_error(-1, "timeline::write_chrome_trace",
                           "cannot write " + path + (errno != 0 ? std::string(": ") + std::strerror(errno) : ""));
  }

 private:
  struct event {
    track where;
    std::string name;
    double start;
    double duration;
    std::vector<std::pair<std::string, std::string>> details;
  };

  static std::string quoted(const std::string& text) {
    std::string q = "\"";
    for (const char c : text) {
      switch (c) {
        case '"': q += "\\\""; break;
        case '\\': q += "\\\\"; break;
        case '\n': q += "\\n"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            static constexpr char hex[] = "0123456789abcdef";
            q += "\\u00";
            q += hex[(c >> 4) & 0xf];
            q += hex[c & 0xf];
          } else {
            q += c;
          }
      }
    }
    return q + "\"";
  }

  mutable std::mutex mutex_;
  std::map<std::int64_t, std::string> process_names_;
  std::map<track, std::string> track_names_;
  std::vector<event> events_;
};

}  // namespace shardwise::sim
