#pragma once
// Device memory for buffers and arenas, cached as PyTorch's CUDA allocator does: a freed block
// goes back to a free list and the next request of about its size takes it, so a training loop
// allocates from the driver only in its first steps (and its CUDA graphs see the same addresses).
// A request the device cannot hold first returns every cached block, then fails with one line
// naming the device, the request and the memory in use.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/gpu.h"

namespace keel::cuda {

class CachingAllocator {
 public:
  // `device` names the GPU in errors ("cuda:0").
  CachingAllocator(std::shared_ptr<Gpu> gpu, std::string device);
  ~CachingAllocator();  // returns every block to the driver
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (rounded up to 512); throws keel::Error "[backend.cuda] out of
  // memory on cuda:0 ..." when the device has no room even with the cache emptied.
  DevicePointer allocate(int64_t bytes, const std::string& what);
  void free(DevicePointer p);  // back to the cache

  backend::MemoryStats stats() const;  // in use (handed out), peak, the device's total
  int64_t cached_bytes() const;        // held from the driver, not handed out
  int64_t driver_allocations() const;  // blocks ever asked of the driver

  static constexpr int64_t kRounding = 512;

 private:
  void release_cached_locked();
  std::shared_ptr<Gpu> gpu_;
  std::string device_;
  mutable std::mutex mu_;
  std::map<DevicePointer, int64_t> handed_out_;   // address -> block size
  std::multimap<int64_t, DevicePointer> cached_;  // block size -> address
  int64_t in_use_ = 0, peak_ = 0, cached_bytes_ = 0, driver_allocations_ = 0;
};

}  // namespace keel::cuda
