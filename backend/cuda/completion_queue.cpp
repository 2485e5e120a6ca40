#include "backend/cuda/completion_queue.h"

namespace keel::cuda {

CompletionQueue::~CompletionQueue() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void CompletionQueue::finish(Entry& e) {
  try {
    e.mark->wait();
    if (e.then) e.then();
    e.done.complete();
  } catch (...) {
    e.done.complete(std::current_exception());
  }
}

Event CompletionQueue::after(std::shared_ptr<StreamMark> mark, std::function<void()> then) {
  Entry e{std::move(mark), std::move(then), Event::pending()};
  std::unique_lock lock(mu_);
  if (entries_.empty() && e.mark->reached()) {  // nothing ahead of it: no thread hop
    lock.unlock();
    finish(e);
    return e.done;
  }
  Event done = e.done;
  entries_.push_back(std::move(e));
  if (!worker_.joinable()) worker_ = std::thread([this] { drain(); });
  cv_.notify_one();
  return done;
}

void CompletionQueue::drain() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !entries_.empty(); });
    if (entries_.empty()) return;  // stopping, with every mark finished
    Entry& e = entries_.front();
    lock.unlock();
    finish(e);  // the front stays queued until done, so later marks keep their order
    lock.lock();
    entries_.pop_front();
  }
}

}  // namespace keel::cuda
