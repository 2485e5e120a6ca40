#include "ir/host_memory.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "ir/error.h"

namespace keel {
namespace {

// Blocks this large are mapped with their pages populated up front: on this class of VM a page
// fault costs ~10 us, and populating in one call is 3-4x cheaper than faulting page by page.
// Fresh mappings are zero already, so zeroed allocations skip the memset.
constexpr size_t kMapBytes = size_t{1} << 20;
constexpr size_t kPageBytes = 4096;

void release_block(std::byte* data, size_t capacity) {
  if (capacity >= kMapBytes) {
    munmap(data, capacity);
  } else {
    std::free(data);
  }
}

struct CachedBlock {
  std::byte* data;
  uint64_t released_at;  // release order, for evicting the oldest first
};

struct HostCache {
  std::mutex mutex;
  std::multimap<size_t, CachedBlock> free_blocks;  // by capacity
  HostMemoryStats stats;
#ifdef KEEL_POISON_MEMORY
  int64_t limit = 0;  // sanitizer builds: every release is a real free, so ASan sees misuse
#else
  int64_t limit = int64_t{4} << 30;
#endif
  uint64_t clock = 0;

  // Caller holds the mutex.
  void evict_until(int64_t target) {
    while (stats.cached_bytes > target && !free_blocks.empty()) {
      auto oldest = free_blocks.begin();
      for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it) {
        if (it->second.released_at < oldest->second.released_at) oldest = it;
      }
      stats.cached_bytes -= static_cast<int64_t>(oldest->first);
      release_block(oldest->second.data, oldest->first);
      free_blocks.erase(oldest);
    }
  }
};

HostCache& cache() {
  static HostCache* c = new HostCache;  // never destroyed: blocks may be released at exit
  return *c;
}

// Sizes repeat exactly from step to step; rounding only keeps the allocators' contracts.
size_t capacity_for(size_t bytes) {
  if (bytes >= kMapBytes) return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
}

std::byte* fresh_block(size_t capacity) {
  if (capacity < kMapBytes) return static_cast<std::byte*>(std::aligned_alloc(64, capacity));
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

}  // namespace

HostBlock::~HostBlock() {
  HostCache& c = cache();
  std::lock_guard lock(c.mutex);
  c.stats.live_bytes -= static_cast<int64_t>(capacity_);
  if (static_cast<int64_t>(capacity_) > c.limit) {
    release_block(data_, capacity_);
    return;
  }
  c.free_blocks.emplace(capacity_, CachedBlock{data_, ++c.clock});
  c.stats.cached_bytes += static_cast<int64_t>(capacity_);
  c.evict_until(c.limit);
}

std::shared_ptr<HostBlock> allocate_host(size_t bytes, bool zeroed) {
  const size_t capacity = capacity_for(bytes);
  std::byte* data = nullptr;
  HostCache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    auto it = c.free_blocks.find(capacity);
    if (it != c.free_blocks.end()) {
      data = it->second.data;
      c.free_blocks.erase(it);
      c.stats.cached_bytes -= static_cast<int64_t>(capacity);
      ++c.stats.reused_blocks;
    } else {
      ++c.stats.fresh_blocks;
    }
    c.stats.live_bytes += static_cast<int64_t>(capacity);
  }
  const bool fresh = data == nullptr;
  if (fresh) {
    data = fresh_block(capacity);
    if (!data) {
      std::lock_guard lock(c.mutex);
      c.stats.live_bytes -= static_cast<int64_t>(capacity);
      throw Error(fmt::format("[array] out of host memory allocating {} bytes", capacity));
    }
  }
  if (zeroed) {
    if (!fresh || capacity < kMapBytes) std::memset(data, 0, bytes);
  } else {
#ifdef KEEL_POISON_MEMORY
    std::memset(data, 0xFF, bytes);
#endif
  }
  return std::make_shared<HostBlock>(data, bytes, capacity);
}

HostMemoryStats host_memory_stats() {
  std::lock_guard lock(cache().mutex);
  return cache().stats;
}

void set_host_cache_limit(int64_t bytes) {
  HostCache& c = cache();
  std::lock_guard lock(c.mutex);
  c.limit = bytes < 0 ? 0 : bytes;
  c.evict_until(c.limit);
}

int64_t host_cache_limit() {
  std::lock_guard lock(cache().mutex);
  return cache().limit;
}

void release_host_cache() {
  HostCache& c = cache();
  std::lock_guard lock(c.mutex);
  c.evict_until(0);
}

}  // namespace keel
