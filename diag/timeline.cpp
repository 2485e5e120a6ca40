#include "diag/timeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "files/process_clock.h"

namespace keel::diag {
namespace {

using Clock = std::chrono::steady_clock;

// The steady clock's reading when the recorder was made: the zero of now_us() minus the
// process's age then.
Clock::time_point recorder_epoch() {
  static const Clock::time_point epoch = Clock::now();
  return epoch;
}

nlohmann::json metadata(const char* what, int64_t pid, int64_t tid, const std::string& name) {
  return {{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

Timeline& Timeline::process() {
  static Timeline recorder;
  return recorder;
}

Timeline::Timeline() {
  recorder_epoch();
  try {
    start_offset_us_ = std::max(0.0, files::seconds_since_process_start() * 1e6);
  } catch (const std::exception&) {
    start_offset_us_ = 0;  // /proc unreadable: times count from the recorder's start instead
  }
}

void Timeline::enable(bool on) {
  std::lock_guard lock(mu_);
  enabled_ = on;
}

bool Timeline::enabled() const {
  std::lock_guard lock(mu_);
  return enabled_;
}

void Timeline::set_process(int64_t pid, const std::string& label) {
  std::lock_guard lock(mu_);
  pid_ = pid;
  process_label_ = label;
}

// Small numbers in order of first use: track 0 is the first thread that recorded anything.
int64_t Timeline::thread_id() {
  static std::atomic<int64_t> next{0};
  thread_local const int64_t id = next++;
  return id;
}

void Timeline::name_thread(const std::string& name) {
  const int64_t tid = thread_id();
  std::lock_guard lock(mu_);
  thread_names_[tid] = name;
}

double Timeline::now_us() const {
  return start_offset_us_ +
         std::chrono::duration<double, std::micro>(Clock::now() - recorder_epoch()).count();
}

void Timeline::complete(const std::string& name, const std::string& category, double start_us,
                        double end_us, nlohmann::json args) {
  const int64_t tid = thread_id();
  std::lock_guard lock(mu_);
  if (!enabled_) return;
  thread_names_.try_emplace(tid, tid == 0 ? "main" : "thread " + std::to_string(tid));
  add(tid, name, category, start_us, end_us, std::move(args));
}

void Timeline::complete_on(const std::string& track, const std::string& name,
                           const std::string& category, double start_us, double end_us,
                           nlohmann::json args) {
  std::lock_guard lock(mu_);
  if (!enabled_) return;
  const auto [it, added] = named_tracks_.try_emplace(
      track, kFirstNamedTrack + static_cast<int64_t>(named_tracks_.size()));
  if (added) thread_names_[it->second] = track;
  add(it->second, name, category, start_us, end_us, std::move(args));
}

void Timeline::add(int64_t tid, const std::string& name, const std::string& category,
                   double start_us, double end_us, nlohmann::json args) {
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  nlohmann::json e = {{"ph", "X"},
                      {"name", name},
                      {"cat", category},
                      {"ts", start_us},
                      {"dur", std::max(0.0, end_us - start_us)},
                      {"pid", pid_},
                      {"tid", tid}};
  if (!args.empty()) e["args"] = std::move(args);
  events_.push_back(std::move(e));
}

nlohmann::json Timeline::events() const {
  std::lock_guard lock(mu_);
  nlohmann::json out = nlohmann::json::array();
  out.push_back(metadata("process_name", pid_, 0, process_label_));
  for (const auto& [tid, name] : thread_names_) {
    out.push_back(metadata("thread_name", pid_, tid, name));
  }
  for (const nlohmann::json& e : events_) out.push_back(e);
  return out;
}

int64_t Timeline::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

void Timeline::clear() {
  std::lock_guard lock(mu_);
  events_.clear();
  dropped_ = 0;
}

TimelineSpan::TimelineSpan(std::string name, std::string category, nlohmann::json args)
    : name_(std::move(name)), category_(std::move(category)), args_(std::move(args)) {
  Timeline& r = Timeline::process();
  on_ = r.enabled();
  if (on_) start_us_ = r.now_us();
}

TimelineSpan::~TimelineSpan() {
  if (!on_) return;
  try {
    Timeline& r = Timeline::process();
    r.complete(name_, category_, start_us_, r.now_us(), std::move(args_));
  } catch (const std::exception&) {
    // A span lost to a full memory never ends the program.
  }
}

std::string trace_document(const std::vector<nlohmann::json>& processes, int64_t dropped) {
  nlohmann::json all = nlohmann::json::array();
  for (const nlohmann::json& p : processes) {
    for (const nlohmann::json& e : p) all.push_back(e);
  }
  nlohmann::json doc = {{"traceEvents", std::move(all)},
                        {"displayTimeUnit", "ms"},
                        {"otherData", {{"producer", "keel"}, {"dropped_events", dropped}}}};
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace keel::diag
