#pragma once
/// @file
/// Host memory for Arrays: 64-byte aligned blocks, recycled by exact size. A training step
/// frees and reallocates the same sizes every step; reusing them skips the page faults and
/// zero-fill a fresh allocation pays (hundreds of MB per step for gpt2-m's optimizer state).
#include <cstddef>
#include <cstdint>
#include <memory>

namespace keel {

/// The host block cache's counters, process-wide.
struct HostMemoryStats {
  int64_t live_bytes = 0;     ///< handed out and not yet released
  int64_t cached_bytes = 0;   ///< released and kept for reuse
  int64_t reused_blocks = 0;  ///< allocations served from the cache
  int64_t fresh_blocks = 0;   ///< allocations that went to the system
};

/// One allocation; returned to the cache when the last owner lets go.
class HostBlock {
 public:
  /// Owns `data`: `capacity` bytes allocated, `size` of them in use.
  HostBlock(std::byte* data, size_t size, size_t capacity) noexcept
      : data_(data), size_(size), capacity_(capacity) {}
  ~HostBlock();
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;

  std::byte* data() const { return data_; }  ///< the first byte, 64-byte aligned
  size_t size() const { return size_; }      ///< bytes requested

 private:
  std::byte* data_;
  size_t size_;
  size_t capacity_;
};

/// A block of `bytes` bytes, reused from the cache when one is free. Contents are unspecified
/// unless `zeroed`; builds with KEEL_POISON_MEMORY fill them with 0xFF (a NaN for floats) so code
/// that relies on zeroed outputs fails its tests.
std::shared_ptr<HostBlock> allocate_host(size_t bytes, bool zeroed);

HostMemoryStats host_memory_stats();  ///< current counters of the block cache
/// Bytes of released blocks kept for reuse at most; beyond it the oldest go back to the system.
void set_host_cache_limit(int64_t bytes);
int64_t host_cache_limit();  ///< the limit set by set_host_cache_limit
void release_host_cache();   ///< returns every cached block to the system

}  // namespace keel
