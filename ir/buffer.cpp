#include "ir/buffer.h"

#include <fmt/format.h>

#include <condition_variable>
#include <mutex>

#include "ir/error.h"

namespace keel {

struct Event::State {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  bool done = false;
  std::exception_ptr failure;
  std::chrono::steady_clock::time_point at;
};

// Every completed-at-birth event shares one state: a synchronous device allocates none.
Event::Event() {
  static const auto happened = [] {
    auto s = std::make_shared<State>();
    s->done = true;
    return s;
  }();
  state_ = happened;
}

Event::Event(std::shared_ptr<State> state) : state_(std::move(state)) {}

Event Event::pending() {
  return Event(std::make_shared<State>());
}

void Event::complete(std::exception_ptr failure) const {
  {
    std::lock_guard lock(state_->mu);
    if (state_->done) {
      throw Error("[ir] an event completed twice; complete each pending event once");
    }
    state_->done = true;
    state_->failure = std::move(failure);
    state_->at = std::chrono::steady_clock::now();
  }
  state_->cv.notify_all();
}

bool Event::done() const {
  std::lock_guard lock(state_->mu);
  return state_->done;
}

void Event::wait() const {
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->failure) std::rethrow_exception(state_->failure);
}

std::chrono::steady_clock::time_point Event::completed_at() const {
  std::lock_guard lock(state_->mu);
  return state_->at;
}

Buffer::Buffer(DType dtype, Shape shape, std::shared_ptr<DeviceMemory> memory, Event ready) {
  if (!memory) {
    throw Error(
        "[ir] a keel::Buffer made without memory; a backend makes buffers of its own "
        "DeviceMemory");
  }
  auto state = std::make_shared<State>();
  state->dtype = dtype;
  state->shape = std::move(shape);
  state->memory = std::move(memory);
  state->ready = std::move(ready);
  state_ = std::move(state);
}

const Buffer::State& Buffer::state(const char* what) const {
  if (!state_) {
    throw Error(
        fmt::format("[ir] {} an empty keel::Buffer; use one a backend made "
                    "(Client::to_device or a program's result)",
                    what));
  }
  return *state_;
}

DType Buffer::dtype() const {
  return state("the dtype of").dtype;
}

const Shape& Buffer::shape() const {
  return state("the shape of").shape;
}

int64_t Buffer::nbytes() const {
  const State& s = state("the size of");
  return numel(s.shape) * static_cast<int64_t>(dtype_size(s.dtype));
}

std::string Buffer::device() const {
  return state("the device of").memory->device();
}

const void* Buffer::address() const {
  return state("the address of").memory->address();
}

Event Buffer::ready() const {
  const State& s = state("the ready event of");
  std::lock_guard lock(s.mu);
  return s.ready;
}

void Buffer::written(Event done) const {
  state("a write into");
  std::lock_guard lock(state_->mu);
  state_->ready = std::move(done);
}

void Buffer::read_by(Event done) const {
  state("a read of");
  std::lock_guard lock(state_->mu);
  std::erase_if(state_->reads, [](const Event& e) { return e.done(); });
  state_->reads.push_back(std::move(done));
}

void Buffer::wait_for_reads_and_writes() const {
  std::vector<Event> pending;
  {
    std::lock_guard lock(state_->mu);
    pending = state_->reads;
    pending.push_back(state_->ready);
  }
  // A failed read still ends its use of the memory: only the last write's failure is the value's.
  for (size_t i = 0; i + 1 < pending.size(); ++i) {
    try {
      pending[i].wait();
    } catch (...) {
    }
  }
  pending.back().wait();
}

HostCopy Buffer::to_host() const {
  const State& s = state("a host copy of");
  return s.memory->to_host(s.dtype, s.shape, ready());
}

Buffer Buffer::copy() const {
  const State& s = state("a copy of");
  ready().wait();
  auto [memory, done] = s.memory->copy();
  return Buffer(s.dtype, s.shape, std::move(memory), std::move(done));
}

Event Buffer::assign_from_host(const Array& host) const {
  const State& s = state("writing into");
  if (host.dtype() != s.dtype || host.shape() != s.shape) {
    throw Error(
        fmt::format("[ir] a host value of {}{} written into a buffer of {}{}; write a "
                    "value of the buffer's dtype and shape",
                    dtype_name(host.dtype()), shape_str(host.shape()), dtype_name(s.dtype),
                    shape_str(s.shape)));
  }
  wait_for_reads_and_writes();
  Event done = s.memory->copy_from_host(host);
  written(done);
  return done;
}

Event Buffer::assign_from(const Buffer& other) const {
  const State& s = state("writing into");
  const State& from = other.state("writing from");
  if (from.dtype != s.dtype || from.shape != s.shape || other.device() != device()) {
    throw Error(
        fmt::format("[ir] a buffer of {}{} on {} written into one of {}{} on {}; copy "
                    "between buffers of one dtype, shape and device",
                    dtype_name(from.dtype), shape_str(from.shape), other.device(),
                    dtype_name(s.dtype), shape_str(s.shape), device()));
  }
  wait_for_reads_and_writes();
  other.ready().wait();
  Event done = s.memory->copy_from(*from.memory);
  written(done);
  return done;
}

}  // namespace keel
