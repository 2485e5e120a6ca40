#pragma once
// A value in a GPU's memory: a block of the client's caching allocator, returned to it when the
// last handle goes. Every write and read of it is queued on the device's one stream, so stream
// order is the value's order, and a block freed while queued work still reads it is only reused
// by work queued after that.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/completion_queue.h"
#include "backend/cuda/gpu.h"

namespace keel::cuda {

// What the client's buffers and executables share: the GPU, its memory and its stream.
struct DeviceState {
  DeviceState(std::shared_ptr<Gpu> g, backend::Device d)
      : gpu(std::move(g)), device(std::move(d)), allocator(gpu, device.str()) {}
  std::shared_ptr<Gpu> gpu;
  backend::Device device;
  CachingAllocator allocator;
  std::mutex stream;  // one caller queues on the stream at a time (a capture is not interleaved)
  CompletionQueue completions;
  std::atomic<int64_t> host_reads{0}, graph_captures{0}, graph_updates{0}, graph_replays{0};
  std::atomic<int64_t> product_plans{0};  // cuBLASLt plans made by executables loaded
};

class GpuMemory final : public DeviceMemory {
 public:
  // A block of at least `bytes` for `what` (the allocator's error names it).
  GpuMemory(std::shared_ptr<DeviceState> state, int64_t bytes, const std::string& what);
  ~GpuMemory() override;
  GpuMemory(const GpuMemory&) = delete;
  GpuMemory& operator=(const GpuMemory&) = delete;

  std::string device() const override { return state_->device.str(); }
  const void* address() const override { return reinterpret_cast<const void*>(pointer_); }
  HostCopy to_host(DType dtype, const Shape& shape, const Event& after) const override;
  Event copy_from_host(const Array& host) override;
  Event copy_from(const DeviceMemory& other) override;
  std::pair<std::shared_ptr<DeviceMemory>, Event> copy() const override;

  DevicePointer pointer() const { return pointer_; }
  int64_t bytes() const { return bytes_; }
  const DeviceState* owner() const { return state_.get(); }

 private:
  std::shared_ptr<DeviceState> state_;
  DevicePointer pointer_ = 0;
  int64_t bytes_ = 0;
};

// The GPU memory of `buffer`; throws keel::Error naming the device when another client or
// device holds it.
const GpuMemory& gpu_memory(const Buffer& buffer, const DeviceState& state);

}  // namespace keel::cuda
