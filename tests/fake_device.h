#pragma once
// A device whose memory is not the host's, as a GPU's is not: a value lives in bytes the host
// reaches only through copies, each done by a worker thread after the call returns. Tests use it
// to show that the rooms above a backend work through Buffer handles alone.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ir/buffer.h"
#include "ir/error.h"
#include "trace/jit.h"

namespace keel::testing_support {

// Runs copies one after another on its own thread, joined when the process exits.
class FakeDeviceQueue {
 public:
  static FakeDeviceQueue& instance() {
    static FakeDeviceQueue queue;
    return queue;
  }
  // Runs `work` later, then completes `done` (with work's exception, if it throws).
  void later(std::function<void()> work, Event done) {
    {
      std::lock_guard lock(mu_);
      jobs_.emplace_back(std::move(work), std::move(done));
    }
    cv_.notify_one();
  }
  // While held, queued work waits: a test sees what was started before anything finished.
  void hold() {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      held_ = false;
    }
    cv_.notify_one();
  }
  ~FakeDeviceQueue() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    worker_.join();
  }

 private:
  FakeDeviceQueue() : worker_([this] { run(); }) {}
  void run() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || (!held_ && !jobs_.empty()); });
      if (jobs_.empty()) return;
      auto [work, done] = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      try {
        work();
        done.complete();
      } catch (...) {
        done.complete(std::current_exception());
      }
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, Event>> jobs_;
  bool stop_ = false;
  bool held_ = false;
  std::thread worker_;  // last: started once the rest exists
};

class FakeDeviceMemory final : public DeviceMemory {
 public:
  explicit FakeDeviceMemory(const Array& from)
      : bytes_(std::make_shared<Bytes>(from.data(), from.data() + from.nbytes())) {}
  std::string device() const override { return "fake:0"; }
  const void* address() const override { return bytes_->data(); }
  HostCopy to_host(DType dtype, const Shape& shape, const Event& after) const override {
    ++host_copies;
    HostCopy out{Array::uninitialized(dtype, shape), Event::pending()};
    later(  // the queue waits for the last write, as a stream waits for an event
        [bytes = bytes_, into = out.value, after]() mutable {
          after.wait();
          std::memcpy(into.data(), bytes->data(), bytes->size());
        },
        out.done);
    return out;
  }
  Event copy_from_host(const Array& host) override {
    return later(
        [bytes = bytes_, from = host] { std::memcpy(bytes->data(), from.data(), bytes->size()); });
  }
  Event copy_from(const DeviceMemory& other) override {
    const auto* from = dynamic_cast<const FakeDeviceMemory*>(&other);
    if (!from) throw Error("[test] the fake device copies only from its own memory");
    return later([bytes = bytes_, source = from->bytes_] { *bytes = *source; });
  }
  std::pair<std::shared_ptr<DeviceMemory>, Event> copy() const override {
    auto memory = std::make_shared<FakeDeviceMemory>(*this);
    memory->bytes_ = std::make_shared<Bytes>(*bytes_);
    return {memory, Event()};
  }

  static inline std::atomic<int> host_copies{0};  // to_host calls, process-wide

 private:
  using Bytes = std::vector<std::byte>;
  static Event later(std::function<void()> work, Event done = Event::pending()) {
    FakeDeviceQueue::instance().later(std::move(work), done);
    return done;
  }

  std::shared_ptr<Bytes> bytes_;
};

// `host` copied onto the fake device.
inline Buffer fake_device_buffer(const Array& host) {
  return Buffer(host.dtype(), host.shape(), std::make_shared<FakeDeviceMemory>(host));
}

// A JIT whose values live on the fake device and which compiles nothing: what Variables and
// host reads need.
struct FakeDeviceJit : Jit {
  std::string name() const override { return "fake"; }
  std::shared_ptr<Runnable> prepare(const Graph&, const ProgramRequest&) override {
    throw Error("[test] the fake device compiles nothing");
  }
  Buffer to_device(const Array& host) override { return fake_device_buffer(host); }
};

}  // namespace keel::testing_support
