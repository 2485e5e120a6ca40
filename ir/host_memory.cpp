#include "ir/host_memory.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ir/error.h"

namespace keel {
namespace {

// Blocks this large are mapped with their pages populated up front: on this class of VM a page
// fault costs ~10 us, and populating in one call is 3-4x cheaper than faulting page by page.
// They ask for 2 MB pages too (transparent huge pages, where the kernel has them on request):
// the 2 MB-aligned parts of a block take 512 times fewer pages to populate and to miss in the
// TLB. Fresh mappings are zero already, so zeroed allocations skip the memset.
constexpr size_t kMapBytes = size_t{1} << 18;
constexpr size_t kPageBytes = 4096;

// Rounded only to keep the allocators' contracts (aligned_alloc's multiple, whole pages).
size_t capacity_for(size_t bytes) {
  if (bytes >= kMapBytes) return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
}

class SystemBlock final : public HostBlock {
 public:
  SystemBlock(std::byte* data, size_t size, size_t capacity) noexcept
      : HostBlock(data, size), capacity_(capacity) {}
  ~SystemBlock() override {
    if (capacity_ >= kMapBytes) {
      munmap(data(), capacity_);
    } else {
      std::free(data());
    }
  }

 private:
  size_t capacity_;
};

// A fresh private mapping, asked for 2 MB pages and then populated; null when the memory is not
// there (mmap failed, or populating found none).
std::byte* map_populated(size_t capacity) {
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* data = static_cast<std::byte*>(p);
#ifdef MADV_HUGEPAGE
  madvise(p, capacity, MADV_HUGEPAGE);  // advice: without transparent huge pages, 4 KB pages
#endif
  int populated = -1;
#ifdef MADV_POPULATE_WRITE
  populated = madvise(p, capacity, MADV_POPULATE_WRITE);
  if (populated != 0 && errno == ENOMEM) {
    munmap(p, capacity);
    return nullptr;
  }
#endif
  if (populated != 0) {  // a kernel before 5.14 (EINVAL): one write per page, as MAP_POPULATE did
    for (size_t at = 0; at < capacity; at += kPageBytes) {
      *reinterpret_cast<volatile unsigned char*>(data + at) = 0;
    }
  }
  return data;
}

}  // namespace

void prepare_host_bytes(std::byte* data, size_t bytes, bool zeroed) {
  if (zeroed) {
    std::memset(data, 0, bytes);
  } else {
#ifdef KEEL_POISON_MEMORY
    std::memset(data, 0xFF, bytes);
#endif
  }
}

std::shared_ptr<HostBlock> allocate_host(size_t bytes, bool zeroed) {
  const size_t capacity = capacity_for(bytes);
  std::byte* data = nullptr;
  if (capacity < kMapBytes) {
    data = static_cast<std::byte*>(std::aligned_alloc(64, capacity));
  } else {
    data = map_populated(capacity);
  }
  if (!data) {
    throw Error(
        fmt::format("[array] out of host memory allocating {} bytes; free some memory or "
                    "use a smaller batch or model",
                    capacity));
  }
  if (zeroed && capacity >= kMapBytes) {
    // A fresh mapping is zero already.
  } else {
    prepare_host_bytes(data, bytes, zeroed);
  }
  return std::make_shared<SystemBlock>(data, bytes, capacity);
}

std::shared_ptr<HostBlock> allocate_host_untouched(size_t bytes) {
  const size_t capacity = capacity_for(bytes);
  if (capacity < kMapBytes) return allocate_host(bytes, true);
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw Error(fmt::format(
        "[array] out of address space mapping {} bytes; free some memory or use a smaller batch "
        "or model",
        capacity));
  }
  return std::make_shared<SystemBlock>(static_cast<std::byte*>(p), bytes, capacity);
}

}  // namespace keel
