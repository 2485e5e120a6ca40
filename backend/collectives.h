#pragma once
/// @file
/// What a program's collectives call at run time. The backend knows only this interface; the
/// runtime installs dist/'s implementation over the mesh's communicators. Without one, every
/// axis has size 1 (one process) and the collectives are copies.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "ir/collective.h"
#include "ir/dtype.h"

namespace keel::backend {

/// Elements per segment of a fixed-order all_reduce (16 MiB of f32): its staging buffers hold
/// three segments.
inline constexpr int64_t kCollectiveSegmentElements = int64_t{1} << 22;
/// The elements of each block a fixed-order reduce_scatter over `processes` processes combines at
/// a time: its staging buffers hold two segments of every process's block.
inline int64_t reduce_scatter_segment(int64_t processes, int64_t block) {
  return std::min(block, std::max<int64_t>(1, kCollectiveSegmentElements / processes));
}

/// A gather or scatter along an inner dim whose blocks of a row are at least this large goes a
/// row at a time, straight between input and output (a scanned stack's layers, train/'s ZeRO
/// slices); smaller blocks are rearranged through one copy of the whole, in one exchange.
inline constexpr int64_t kRowByRowBlockBytes = int64_t{1} << 18;

/// The collectives a program runs over the axes of the device mesh; implemented by dist/ over
/// communicators.
class Collectives {
 public:
  virtual ~Collectives() = default;
  /// The size of `axis`; keel::Error naming the axis when the mesh has none of that name.
  virtual int64_t axis_size(const std::string& axis) const = 0;
  /// This process's coordinate on `axis`.
  virtual int64_t axis_index(const std::string& axis) const = 0;
  /// Whether a collective reaches another process. Then programs run on the thread that calls
  /// them, which owns the communicators (MPI_THREAD_SERIALIZED), in the order it calls them.
  virtual bool reaches_other_processes() const { return false; }
  /// Reduces `in` with `kind` over the processes of `axis` into `out`. Contiguous buffers of
  /// `count` elements (in and out may not overlap).
  virtual void all_reduce(const std::string& axis, ReduceKind kind, DType dtype, const void* in,
                          void* out, int64_t count) = 0;
  /// Gathers `in` from every process of `axis`. out: axis_size blocks of `count` elements, in
  /// axis order.
  virtual void all_gather(const std::string& axis, DType dtype, const void* in, void* out,
                          int64_t count) = 0;
  /// Sums over `axis` and keeps this process's block. in: axis_size blocks of `count` elements;
  /// out: the sum over the axis of block axis_index.
  virtual void reduce_scatter(const std::string& axis, DType dtype, const void* in, void* out,
                              int64_t count) = 0;
  /// Sends block j of `in` to process j of `axis`. in and out: axis_size blocks of `count`
  /// elements; block i of out is process i's block axis_index.
  virtual void all_to_all(const std::string& axis, DType dtype, const void* in, void* out,
                          int64_t count) = 0;
};

/// Installs the collectives programs call. Process-wide; null restores the one-process default.
void set_collectives(std::shared_ptr<Collectives> c);
/// The installed collectives, else the one-process default (every axis size 1).
Collectives& collectives();

/// Runs collective node `op` (attrs as ir/collective.h) on a row-major input of `in_type` into
/// a row-major output; gathers and scatters along any dim. keel::Error when the program's
/// axis_size differs from the mesh's (a program typed for another mesh).
void run_collective(Op op, const Attrs& attrs, const TensorType& in_type, const void* in,
                    void* out);
/// The bytes run_collective and the exchange below it allocate beyond input and output, for the
/// memory prediction (the axis size is the program's).
int64_t collective_scratch_bytes(Op op, const Attrs& attrs, const TensorType& in_type);

}  // namespace keel::backend
