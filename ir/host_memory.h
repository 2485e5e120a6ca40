#pragma once
/// @file
/// Host memory for Arrays and CPU program arenas: 64-byte aligned blocks from the system, the
/// large ones mapped with their pages populated, on 2 MB pages where the kernel allows. An
/// allocator that recycles blocks (the CPU backend's, for its programs' outputs:
/// backend/cpu/host_block_cache.h) hands Arrays blocks of its own.
#include <cstddef>
#include <memory>

namespace keel {

/// Bytes an Array views, 64-byte aligned; the allocator that made them takes them back when the
/// last owner lets go.
class HostBlock {
 public:
  virtual ~HostBlock() = default;
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;

  std::byte* data() const { return data_; }  ///< the first byte, 64-byte aligned
  size_t size() const { return size_; }      ///< bytes requested

 protected:
  /// `size` bytes at `data`, owned by the subclass.
  HostBlock(std::byte* data, size_t size) noexcept : data_(data), size_(size) {}

 private:
  std::byte* data_;
  size_t size_;
};

/// A block of `bytes` bytes from the system, returned to it when the last owner lets go.
/// Contents are unspecified unless `zeroed`; builds with KEEL_POISON_MEMORY fill them with 0xFF
/// (a NaN for floats) so code that relies on zeroed outputs fails its tests.
std::shared_ptr<HostBlock> allocate_host(size_t bytes, bool zeroed);
/// A block of `bytes` zero bytes whose pages the system maps only where they are first touched:
/// for values whose type alone matters (the results a program is prepared with, never run), so
/// they take no memory. Small ones come from the heap, zeroed.
std::shared_ptr<HostBlock> allocate_host_untouched(size_t bytes);
/// Fills a reused block as a fresh allocation of `zeroed` would be: zeros, or (poisoning
/// builds) 0xFF.
void prepare_host_bytes(std::byte* data, size_t bytes, bool zeroed);

}  // namespace keel
