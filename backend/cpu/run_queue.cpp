#include "backend/cpu/run_queue.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

namespace keel::cpu {

struct RunQueue::State {
  std::mutex mu;
  std::condition_variable changed;
  std::deque<std::function<void()>> queued;
  int in_flight = 0;  // queued plus running
  Event last;         // the last dispatched run's
  std::thread::id worker_id;
  // A forked child has no worker: it runs what it dispatches itself and never takes `mu`, which
  // the fork may have copied locked. Runs in flight at the fork never finish in the child.
  pid_t pid = getpid();
  bool forked() const { return getpid() != pid; }
};

RunQueue::RunQueue() : state_(new State) {
  State& s = *state_;
  std::thread worker([&s] {
    for (;;) {
      std::function<void()> run;
      {
        std::unique_lock lock(s.mu);
        s.changed.wait(lock, [&] { return !s.queued.empty(); });
        run = std::move(s.queued.front());
        s.queued.pop_front();
      }
      run();
      run = nullptr;  // what it captured goes before the queue counts it finished
      {
        std::lock_guard lock(s.mu);
        --s.in_flight;
      }
      s.changed.notify_all();
    }
  });
  s.worker_id = worker.get_id();
  worker.detach();  // blocked on its condition at exit; the state is never freed
  // No run may be mid-flight while exit destroys the statics it could touch.
  std::atexit([] {
    if (!run_queue().on_worker()) run_queue().drain();
  });
}

void RunQueue::dispatch(std::function<void()> run, Event finished) {
  State& s = *state_;
  if (s.forked()) {
    run();
    return;
  }
  {
    std::unique_lock lock(s.mu);
    s.changed.wait(lock, [&] { return s.in_flight < kMaxInFlight; });
    ++s.in_flight;
    s.queued.push_back(std::move(run));
    s.last = std::move(finished);
  }
  s.changed.notify_all();
}

void RunQueue::drain() {
  State& s = *state_;
  if (s.forked()) return;
  std::unique_lock lock(s.mu);
  s.changed.wait(lock, [&] { return s.in_flight == 0; });
}

Event RunQueue::after_dispatched() const {
  if (state_->forked()) return Event();
  std::lock_guard lock(state_->mu);
  return state_->last;
}

bool RunQueue::on_worker() const {
  return std::this_thread::get_id() == state_->worker_id;
}

int RunQueue::in_flight() const {
  if (state_->forked()) return 0;
  std::lock_guard lock(state_->mu);
  return state_->in_flight;
}

RunQueue& run_queue() {
  static RunQueue* queue = new RunQueue;  // never destroyed, like the worker it owns
  return *queue;
}

}  // namespace keel::cpu
