#include "backend/cuda/caching_allocator.h"

#include <fmt/format.h>

#include <algorithm>

#include "ir/error.h"

namespace keel::cuda {

CachingAllocator::CachingAllocator(std::shared_ptr<Gpu> gpu, std::string device)
    : gpu_(std::move(gpu)), device_(std::move(device)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mu_);
  for (const auto& [p, size] : handed_out_) cached_.emplace(size, p);
  handed_out_.clear();
  release_cached_locked();
}

DevicePointer CachingAllocator::allocate(int64_t bytes, const std::string& what) {
  const int64_t size = std::max<int64_t>(1, (bytes + kRounding - 1) / kRounding) * kRounding;
  std::lock_guard lock(mu_);
  // The smallest cached block that holds it, if it wastes at most half of itself; of blocks of
  // one size, the first freed, so outputs freed in order come back in order (a graph's addresses
  // then repeat).
  auto it = cached_.lower_bound(size);
  DevicePointer p = 0;
  int64_t block = size;
  if (it != cached_.end() && it->first <= 2 * size) {
    block = it->first;
    p = it->second;
    cached_.erase(it);
    cached_bytes_ -= block;
  } else {
    p = gpu_->allocate(size);
    if (p == 0 && cached_bytes_ > 0) {
      release_cached_locked();
      p = gpu_->allocate(size);
    }
    if (p == 0) {
      throw Error(fmt::format(
          "[backend.cuda] out of memory on {} ({}): {} bytes for {}, with {} bytes in use by "
          "live buffers and programs (peak {}) of its {}; fix: a smaller batch or model, or "
          "fewer live buffers",
          device_, gpu_->info().name, size, what, in_use_, peak_, gpu_->info().memory_bytes));
    }
    ++driver_allocations_;
  }
  handed_out_[p] = block;
  in_use_ += block;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void CachingAllocator::free(DevicePointer p) {
  std::lock_guard lock(mu_);
  auto it = handed_out_.find(p);
  if (it == handed_out_.end()) {
    throw Error(
        fmt::format("[backend.cuda] internal: {} freed an address it never handed out", device_));
  }
  in_use_ -= it->second;
  cached_bytes_ += it->second;
  cached_.emplace(it->second, p);
  handed_out_.erase(it);
}

void CachingAllocator::release_cached_locked() {
  if (cached_.empty()) return;
  // A cached block may still be read by queued work; cuMemFree need not wait for it.
  try {
    gpu_->synchronize();
  } catch (const Error&) {  // a failed device: its memory goes back all the same
  }
  std::multimap<int64_t, DevicePointer> blocks;
  blocks.swap(cached_);
  cached_bytes_ = 0;
  for (const auto& [size, p] : blocks) gpu_->release(p);
}

backend::MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return {in_use_, peak_, gpu_->info().memory_bytes};
}

int64_t CachingAllocator::cached_bytes() const {
  std::lock_guard lock(mu_);
  return cached_bytes_;
}

int64_t CachingAllocator::driver_allocations() const {
  std::lock_guard lock(mu_);
  return driver_allocations_;
}

}  // namespace keel::cuda
