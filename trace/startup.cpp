#include "trace/startup.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>

#include "ir/error.h"

namespace keel {
namespace {

std::atomic<StartupPhase> phase{StartupPhase::uninitialised};
std::mutex mu;
std::optional<SourceLoc> first;

}  // namespace

const char* startup_phase_name(StartupPhase p) {
  switch (p) {
    case StartupPhase::uninitialised:
      return "uninitialised";
    case StartupPhase::initialised:
      return "initialised";
    case StartupPhase::running:
      return "running";
  }
  return "?";
}

StartupPhase startup_phase() {
  return phase.load(std::memory_order_acquire);
}

void set_startup_phase(StartupPhase p) {
  std::lock_guard lock(mu);
  if (p == StartupPhase::uninitialised) first.reset();
  phase.store(p, std::memory_order_release);
}

void note_tensor_created(const SourceLoc& loc) {
  StartupPhase p = phase.load(std::memory_order_acquire);
  if (p == StartupPhase::running) return;
  if (p == StartupPhase::uninitialised) {
    throw Error(fmt::format(
        "[runtime] tensor created at {} before keel::Runtime::init; rule: the launch policy is "
        "frozen, the backend probed and the mesh built before any tensor or Variable exists; "
        "fix: create the keel::Runtime first thing in main (keel::Runtime runtime(policy))",
        loc.str()));
  }
  std::lock_guard lock(mu);
  if (phase.load() == StartupPhase::initialised) {
    first = loc;
    phase.store(StartupPhase::running, std::memory_order_release);
  }
}

std::optional<SourceLoc> first_tensor_location() {
  std::lock_guard lock(mu);
  return first;
}

}  // namespace keel
