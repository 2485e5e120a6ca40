#pragma once
// The CPU device's queue of program runs, as a GPU's stream: one worker thread runs them in the
// order they were dispatched, so the host goes on (the next batch, the next dispatch) while a
// step computes, and reads a value only when it waits on its event.
#include <functional>

#include "ir/buffer.h"

namespace keel::cpu {

// In a forked child (no worker there) dispatch runs at once and the rest report nothing queued.
class RunQueue {
 public:
  // Runs at most this many dispatched runs ahead of the host: a third dispatch waits, so memory
  // for outputs is bounded as PJRT's in-flight limit bounds it.
  static constexpr int kMaxInFlight = 2;

  // Queues `run` behind every earlier one; waits while kMaxInFlight runs are queued or running.
  // `run` must not throw; it completes `finished`, its failure included.
  void dispatch(std::function<void()> run, Event finished);
  // When every run dispatched so far has finished (the last one's `finished`): CUDA's event
  // recorded on a stream.
  Event after_dispatched() const;
  // Waits until every dispatched run has finished.
  void drain();
  // Whether the calling thread is the worker (a run that dispatches would wait on itself).
  bool on_worker() const;
  int in_flight() const;  // dispatched and not yet finished

  RunQueue(const RunQueue&) = delete;
  RunQueue& operator=(const RunQueue&) = delete;

 private:
  RunQueue();
  friend RunQueue& run_queue();
  struct State;
  State* state_;  // never freed: runs may still be queued while the process exits
};

// The process's one queue (the device cpu:0's).
RunQueue& run_queue();

}  // namespace keel::cpu
