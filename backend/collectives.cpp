#include "backend/collectives.h"

#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "ir/error.h"
#include "ir/shape.h"

namespace keel::backend {
namespace {

// One process: every axis has size 1, so each collective hands its input back.
class OneProcess final : public Collectives {
 public:
  int64_t axis_size(const std::string&) const override { return 1; }
  int64_t axis_index(const std::string&) const override { return 0; }
  void all_reduce(const std::string&, ReduceKind, DType dtype, const void* in, void* out,
                  int64_t count) override {
    std::memmove(out, in, static_cast<size_t>(count * dtype_size(dtype)));
  }
  void all_gather(const std::string&, DType dtype, const void* in, void* out,
                  int64_t count) override {
    std::memmove(out, in, static_cast<size_t>(count * dtype_size(dtype)));
  }
  void reduce_scatter(const std::string&, DType dtype, const void* in, void* out,
                      int64_t count) override {
    std::memmove(out, in, static_cast<size_t>(count * dtype_size(dtype)));
  }
  void all_to_all(const std::string&, DType dtype, const void* in, void* out,
                  int64_t count) override {
    std::memmove(out, in, static_cast<size_t>(count * dtype_size(dtype)));
  }
};

std::mutex installed_mutex;
std::shared_ptr<Collectives> installed;

// [outer][blocks][inner] <-> [blocks][outer][inner] for a gather or scatter along a dim.
void swap_leading(const std::byte* in, std::byte* out, int64_t outer, int64_t blocks,
                  int64_t inner_bytes, bool to_blocks_first) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t src = to_blocks_first ? o * blocks + b : b * outer + o;
      const int64_t dst = to_blocks_first ? b * outer + o : o * blocks + b;
      std::memcpy(out + dst * inner_bytes, in + src * inner_bytes,
                  static_cast<size_t>(inner_bytes));
    }
  }
}

// A gather's or scatter's blocks along its dim: the dims before it are `outer`, a block (of one
// process, in one of the `outer` rows) is its share and what follows.
struct RowBlocks {
  int64_t outer = 1, piece_bytes = 0;
  bool by_row = false;  // a row at a time, straight between input and output
};

RowBlocks row_blocks(Op op, const Attrs& attrs, const TensorType& in_type, int64_t size) {
  RowBlocks b;
  for (int64_t d = 0; d < attrs.i("dim"); ++d) b.outer *= in_type.shape[static_cast<size_t>(d)];
  const auto esize = static_cast<int64_t>(dtype_size(in_type.dtype));
  b.piece_bytes = numel(in_type.shape) / std::max<int64_t>(b.outer, 1) * esize /
                  (op == Op::all_gather ? 1 : size);
  b.by_row = op != Op::all_to_all && b.outer > 1 && b.piece_bytes >= kRowByRowBlockBytes;
  return b;
}

}  // namespace

void set_collectives(std::shared_ptr<Collectives> c) {
  std::lock_guard lock(installed_mutex);
  installed = std::move(c);
}

Collectives& collectives() {
  static OneProcess one_process;
  std::lock_guard lock(installed_mutex);
  return installed ? *installed : one_process;
}

void run_collective(Op op, const Attrs& attrs, const TensorType& in_type, const void* in,
                    void* out) {
  Collectives& c = collectives();
  const std::string& axis = attrs.s("axis");
  const int64_t size = attrs.i("axis_size");
  if (c.axis_size(axis) != size) {
    throw Error(fmt::format(
        "[collective] {} over axis '{}' was compiled for {} processes on that axis but this "
        "mesh has {}; trace it again under this mesh",
        op_name(op), axis, size, c.axis_size(axis)));
  }
  if (op == Op::axis_index) {
    const auto index = static_cast<int32_t>(c.axis_index(axis));
    std::memcpy(out, &index, sizeof index);
    return;
  }
  const int64_t count = numel(in_type.shape);
  const DType dt = in_type.dtype;
  if (op == Op::all_reduce) {
    c.all_reduce(axis, parse_reduce_kind(attrs.s("reduce")), dt, in, out, count);
    return;
  }
  const auto [outer, piece_bytes, by_row] = row_blocks(op, attrs, in_type, size);
  const auto esize = static_cast<int64_t>(dtype_size(dt));
  const auto* from = static_cast<const std::byte*>(in);
  auto* to = static_cast<std::byte*>(out);
  if (op == Op::all_to_all) {
    if (outer == 1) return c.all_to_all(axis, dt, in, out, count / size);
    // Blocks first, exchanged, and back in place: two copies of the whole.
    std::vector<std::byte> sent(static_cast<size_t>(count * esize)),
        received(static_cast<size_t>(count * esize));
    swap_leading(from, sent.data(), outer, size, piece_bytes, true);
    c.all_to_all(axis, dt, sent.data(), received.data(), count / size);
    swap_leading(received.data(), to, outer, size, piece_bytes, false);
    return;
  }
  if (op == Op::all_gather) {
    if (outer == 1) return c.all_gather(axis, dt, in, out, count);
    if (by_row) {  // row o of out is every process's block of row o, in axis order
      for (int64_t o = 0; o < outer; ++o) {
        c.all_gather(axis, dt, from + o * piece_bytes, to + o * size * piece_bytes, count / outer);
      }
      return;
    }
    std::vector<std::byte> blocks(static_cast<size_t>(count * size * esize));
    c.all_gather(axis, dt, in, blocks.data(), count);
    swap_leading(blocks.data(), static_cast<std::byte*>(out), outer, size, piece_bytes, false);
    return;
  }
  if (outer == 1) return c.reduce_scatter(axis, dt, in, out, count / size);
  if (by_row) {  // row o of in holds every process's block of row o
    for (int64_t o = 0; o < outer; ++o) {
      c.reduce_scatter(axis, dt, from + o * size * piece_bytes, to + o * piece_bytes,
                       count / outer / size);
    }
    return;
  }
  std::vector<std::byte> blocks(static_cast<size_t>(count * esize));
  swap_leading(static_cast<const std::byte*>(in), blocks.data(), outer, size, piece_bytes, true);
  c.reduce_scatter(axis, dt, blocks.data(), out, count / size);
}

int64_t collective_scratch_bytes(Op op, const Attrs& attrs, const TensorType& in_type) {
  const int64_t size = attrs.i("axis_size");
  if (op == Op::axis_index || size == 1) return 0;
  const int64_t count = numel(in_type.shape);
  const auto esize = static_cast<int64_t>(dtype_size(in_type.dtype));
  // bf16 is combined in f32: a widened copy of every block.
  const int64_t widen = in_type.dtype == DType::bf16 ? 2 : 1;
  if (op == Op::all_reduce) {
    const int64_t segment = std::min(count, kCollectiveSegmentElements);
    return (3 + widen) * (segment + size) * esize;
  }
  const auto [outer, piece_bytes, by_row] = row_blocks(op, attrs, in_type, size);
  if (op == Op::all_to_all) return outer > 1 ? 2 * count * esize : 0;
  const int64_t rearranged =
      outer > 1 && !by_row ? count * esize * (op == Op::all_gather ? size : 1) : 0;
  // reduce_scatter: every process's piece of a segment received (bf16 widened), and a send copy
  // when the block is cut into segments.
  int64_t received = 0;
  if (op == Op::reduce_scatter) {
    const int64_t block = count / size / (by_row ? outer : 1),
                  segment = reduce_scatter_segment(size, block);
    received = (1 + widen + (segment < block ? 1 : 0)) * size * segment * esize;
  }
  return rearranged + received;
}

}  // namespace keel::backend
