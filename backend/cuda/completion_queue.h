#pragma once
// Turns marks on a GPU's stream into keel::Events: a thread of the client waits for each mark in
// the order they were queued, runs what was to follow it on the host (a copy out of page-locked
// memory) and completes the event, so no caller blocks on the device to learn a run is done.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/cuda/gpu.h"
#include "ir/buffer.h"

namespace keel::cuda {

class CompletionQueue {
 public:
  CompletionQueue() = default;
  ~CompletionQueue();  // waits for every queued mark
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // An event that completes once `mark` is reached and `then` (may be empty) has run; a device
  // failure or one of `then` fails the event.
  Event after(std::shared_ptr<StreamMark> mark, std::function<void()> then = {});

 private:
  struct Entry {
    std::shared_ptr<StreamMark> mark;
    std::function<void()> then;
    Event done;
  };
  static void finish(Entry& e);
  void drain();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> entries_;
  bool stopping_ = false;
  std::thread worker_;  // started by the first mark not yet reached
};

}  // namespace keel::cuda
