#include "backend/cpu/host_block_cache.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "ir/error.h"

namespace keel::cpu {
namespace {

struct FreeBlock {
  std::shared_ptr<HostBlock> block;
  uint64_t released_at;  // release order, for evicting the oldest first
};

struct Cache {
  std::mutex mutex;
  std::multimap<size_t, FreeBlock> free_blocks;  // by size
  HostCacheStats stats;
#ifdef KEEL_POISON_MEMORY
  int64_t limit = 0;
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
      free_blocks.erase(oldest);
    }
  }

  // A cached block's last owner let go: keep its system block for the next of its size.
  void give_back(std::shared_ptr<HostBlock> block) {
    const size_t size = block->size();
    std::lock_guard lock(mutex);
    stats.live_bytes -= static_cast<int64_t>(size);
    if (size == 0 || static_cast<int64_t>(size) > limit) return;  // freed as `block` goes
    free_blocks.emplace(size, FreeBlock{std::move(block), ++clock});
    stats.cached_bytes += static_cast<int64_t>(size);
    evict_until(limit);
  }
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: blocks may be released at exit
  return *c;
}

// A system block lent to an Array; returned to the cache instead of the system.
class CachedBlock final : public HostBlock {
 public:
  explicit CachedBlock(std::shared_ptr<HostBlock> block)
      : HostBlock(block->data(), block->size()), block_(std::move(block)) {}
  ~CachedBlock() override { cache().give_back(std::move(block_)); }

 private:
  std::shared_ptr<HostBlock> block_;
};

}  // namespace

std::shared_ptr<HostBlock> allocate_cached(size_t bytes, bool zeroed) {
  Cache& c = cache();
  std::shared_ptr<HostBlock> block;
  {
    std::lock_guard lock(c.mutex);
    auto it = c.free_blocks.find(bytes);
    if (it != c.free_blocks.end()) {
      block = std::move(it->second.block);
      c.free_blocks.erase(it);
      c.stats.cached_bytes -= static_cast<int64_t>(bytes);
      ++c.stats.reused_blocks;
    } else {
      ++c.stats.fresh_blocks;
    }
    c.stats.live_bytes += static_cast<int64_t>(bytes);
  }
  try {
    if (block) {
      prepare_host_bytes(block->data(), bytes, zeroed);
    } else {
      block = allocate_host(bytes, zeroed);
    }
    return std::make_shared<CachedBlock>(std::move(block));
  } catch (...) {
    std::lock_guard lock(c.mutex);
    c.stats.live_bytes -= static_cast<int64_t>(bytes);
    throw;
  }
}

Array cached_array(DType dtype, Shape shape, bool zeroed) {
  for (int64_t d : shape) {
    if (d < 0) {
      throw Error(fmt::format("[backend.cpu] an output of shape {}: a dimension is negative",
                              shape_str(shape)));
    }
  }
  const size_t bytes = static_cast<size_t>(numel(shape)) * dtype_size(dtype);
  return Array::adopt(dtype, std::move(shape), allocate_cached(bytes, zeroed));
}

HostCacheStats host_cache_stats() {
  std::lock_guard lock(cache().mutex);
  return cache().stats;
}

void set_host_cache_limit(int64_t bytes) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.limit = bytes < 0 ? 0 : bytes;
  c.evict_until(c.limit);
}

int64_t host_cache_limit() {
  std::lock_guard lock(cache().mutex);
  return cache().limit;
}

void release_host_cache() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.evict_until(0);
}

}  // namespace keel::cpu
