#pragma once
// The CPU backend's host memory for its programs' outputs: blocks recycled by exact size. A
// training step frees and reallocates the same sizes every step; reusing them skips the page
// faults and zero-fill a fresh allocation pays (hundreds of MB per step for gpt2-m's optimizer
// state). Arrays the host makes for itself come from the system (ir/host_memory.h).
#include <cstdint>
#include <memory>

#include "ir/array.h"

namespace keel::cpu {

// The cache's counters, process-wide.
struct HostCacheStats {
  int64_t live_bytes = 0;     // handed out and not yet released
  int64_t cached_bytes = 0;   // released and kept for reuse
  int64_t reused_blocks = 0;  // allocations served from the cache
  int64_t fresh_blocks = 0;   // allocations that went to the system
};

// A block of `bytes` bytes, reused from the cache when one of that size is free; prepared as
// allocate_host's would be (zeros when `zeroed`).
std::shared_ptr<HostBlock> allocate_cached(size_t bytes, bool zeroed);
// An array over a cached block, uninitialized unless `zeroed`: a program output, or memory a
// client allocates. keel::Error for a negative dimension.
Array cached_array(DType dtype, Shape shape, bool zeroed = false);

HostCacheStats host_cache_stats();  // current counters
// Bytes of released blocks kept for reuse at most; beyond it the oldest go back to the system.
// Sanitizer builds (KEEL_POISON_MEMORY) start at 0, so every release is a real free.
void set_host_cache_limit(int64_t bytes);
int64_t host_cache_limit();  // the limit set by set_host_cache_limit
void release_host_cache();   // returns every cached block to the system

}  // namespace keel::cpu
