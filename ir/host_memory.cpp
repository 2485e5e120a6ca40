#include "ir/host_memory.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "ir/error.h"

namespace keel {
namespace {

// Blocks this large (malloc maps them anyway, from 128 KB) are mapped with their pages populated
// up front: on this class of VM a page fault costs ~10 us, and populating in one call is 3-4x
// cheaper than faulting page by page.
// They ask for 2 MB pages too (transparent huge pages, where the kernel allows them): 512 times
// fewer pages to populate and to miss in the TLB. Fresh mappings are zero already, so zeroed
// allocations skip the memset.
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
    void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
    // Advice only: a kernel without either (before 5.14 for the second) faults pages on touch.
    if (data) {
      madvise(p, capacity, MADV_HUGEPAGE);
      madvise(p, capacity, MADV_POPULATE_WRITE);
    }
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

}  // namespace keel
