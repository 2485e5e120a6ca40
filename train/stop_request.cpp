#include "train/stop_request.h"

#include <atomic>

namespace keel::train {
namespace {

std::atomic<int> stop_signal{0};
std::atomic<bool> started{false};
static_assert(std::atomic<int>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

}  // namespace

void request_stop(int signal) {
  int none = 0;
  stop_signal.compare_exchange_strong(none, signal);
}

int stop_requested() {
  return stop_signal.load();
}

void clear_stop_request() {
  stop_signal.store(0);
  started.store(false);
}

void mark_steps_started() {
  started.store(true);
}

bool steps_started() {
  return started.load();
}

}  // namespace keel::train
