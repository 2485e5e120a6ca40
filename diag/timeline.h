#pragma once
// The run's timeline in the Chrome trace event format (Perfetto, chrome://tracing): complete
// events ("ph":"X") on one track per thread of each process, in microseconds since the process
// started, so the first span ("init") starts at 0 and nothing before main is lost.
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace keel::diag {

class Timeline {
 public:
  // The process's recorder; off until enable(), so tools and tests that never ask pay nothing.
  static Timeline& process();

  void enable(bool on = true);
  bool enabled() const;
  // The process's track group: its rank and a label ("rank 1 on host b").
  void set_process(int64_t pid, const std::string& label);
  // Names the calling thread's track ("main").
  void name_thread(const std::string& name);

  // Microseconds since this process started.
  double now_us() const;
  // One span of the calling thread; `args` is shown on hover. Ignored when off; beyond
  // kMaxEvents spans are counted as dropped instead of kept.
  void complete(const std::string& name, const std::string& category, double start_us,
                double end_us, nlohmann::json args = nlohmann::json::object());
  // One span on the track named `track` ("device": work that ran apart from the threads that
  // asked for it, as a step's programs after their call returned), as complete().
  void complete_on(const std::string& track, const std::string& name, const std::string& category,
                   double start_us, double end_us, nlohmann::json args = nlohmann::json::object());

  // This process's spans and track names as a JSON array of trace events.
  nlohmann::json events() const;
  int64_t dropped() const;
  void clear();

  static constexpr size_t kMaxEvents = 200000;  // a few hundred bytes each

 private:
  Timeline();
  int64_t thread_id();
  void add(int64_t tid, const std::string& name, const std::string& category, double start_us,
           double end_us, nlohmann::json args);  // caller holds mu_

  static constexpr int64_t kFirstNamedTrack = 1000000;  // above any thread's id
  std::map<std::string, int64_t> named_tracks_;

  mutable std::mutex mu_;
  bool enabled_ = false;
  int64_t pid_ = 0;
  std::string process_label_ = "keel";
  double start_offset_us_ = 0;  // process age when the recorder was made
  std::map<int64_t, std::string> thread_names_;
  std::vector<nlohmann::json> events_;
  int64_t dropped_ = 0;
};

// A span from construction to destruction on the process's recorder; a no-op when it is off.
class TimelineSpan {
 public:
  TimelineSpan(std::string name, std::string category,
               nlohmann::json args = nlohmann::json::object());
  ~TimelineSpan();
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;
  void arg(const std::string& key, nlohmann::json value) { args_[key] = std::move(value); }
  bool on() const { return on_; }  // callers on hot paths add arguments only then

 private:
  std::string name_, category_;
  nlohmann::json args_;
  double start_us_ = 0;
  bool on_ = false;
};

// The trace file: every process's events (one array each, from events()) in one document.
std::string trace_document(const std::vector<nlohmann::json>& processes, int64_t dropped);

}  // namespace keel::diag
