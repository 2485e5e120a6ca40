#include "backend/cuda/device_memory.h"

#include <fmt/format.h>

#include <cstring>

#include "ir/error.h"

namespace keel::cuda {

GpuMemory::GpuMemory(std::shared_ptr<DeviceState> state, int64_t bytes, const std::string& what)
    : state_(std::move(state)), pointer_(state_->allocator.allocate(bytes, what)), bytes_(bytes) {}

GpuMemory::~GpuMemory() {
  state_->allocator.free(pointer_);
}

HostCopy GpuMemory::to_host(DType dtype, const Shape& shape, const Event& after) const {
  (void)after;  // the value's last write is queued on the stream before this copy
  Array value = Array::uninitialized(dtype, shape);
  if (static_cast<int64_t>(value.nbytes()) > bytes_) {
    throw Error(fmt::format("[backend.cuda] a host copy of {} bytes of {} read as {}{}", bytes_,
                            device(), dtype_name(dtype), shape_str(shape)));
  }
  ++state_->host_reads;
  const auto n = static_cast<int64_t>(value.nbytes());
  if (n == 0) return {value, Event()};
  Gpu& gpu = *state_->gpu;
  void* staging = gpu.allocate_host(n);
  std::shared_ptr<StreamMark> mark;
  {
    std::lock_guard lock(state_->stream);
    gpu.copy_to_host(staging, pointer_, n);
    mark = gpu.mark();
  }
  // The GPU, not the state: the last reference to the state must never be dropped on the
  // completion thread, whose queue the state owns.
  std::shared_ptr<Gpu> owner = state_->gpu;
  Event done = state_->completions.after(mark, [owner, staging, value, n]() mutable {
    std::memcpy(value.data(), staging, static_cast<size_t>(n));
    owner->release_host(staging);
  });
  return {value, done};
}

Event GpuMemory::copy_from_host(const Array& host) {
  if (static_cast<int64_t>(host.nbytes()) > bytes_) {
    throw Error(fmt::format("[backend.cuda] {} bytes copied into {} bytes of {}", host.nbytes(),
                            bytes_, device()));
  }
  std::lock_guard lock(state_->stream);
  if (host.nbytes() > 0) state_->gpu->copy_to_device(pointer_, host.data(), host.nbytes());
  return state_->completions.after(state_->gpu->mark());
}

Event GpuMemory::copy_from(const DeviceMemory& other) {
  const auto* from = dynamic_cast<const GpuMemory*>(&other);
  if (!from || from->state_ != state_) {
    throw Error(fmt::format(
        "[backend.cuda] a copy into {} from {}, another device or client; copy through the "
        "host (to_host, then to_device)",
        device(), other.device()));
  }
  std::lock_guard lock(state_->stream);
  state_->gpu->copy_on_device(pointer_, from->pointer_, std::min(bytes_, from->bytes_));
  return state_->completions.after(state_->gpu->mark());
}

std::pair<std::shared_ptr<DeviceMemory>, Event> GpuMemory::copy() const {
  auto to = std::make_shared<GpuMemory>(state_, bytes_, "a copy of a buffer");
  std::lock_guard lock(state_->stream);
  state_->gpu->copy_on_device(to->pointer_, pointer_, bytes_);
  return {to, state_->completions.after(state_->gpu->mark())};
}

const GpuMemory& gpu_memory(const Buffer& buffer, const DeviceState& state) {
  const auto* m = buffer.memory_as<GpuMemory>();
  if (!m || m->owner() != &state) {
    throw Error(fmt::format(
        "[backend.cuda] a buffer on {} (another client's) given to a program on {}; move it "
        "first (to_host, then this client's to_device)",
        buffer.defined() ? buffer.device() : std::string("nothing"), state.device.str()));
  }
  return *m;
}

}  // namespace keel::cuda
