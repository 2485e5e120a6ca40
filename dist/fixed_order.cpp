#include "dist/fixed_order.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/collectives.h"
#include "ir/error.h"

namespace keel::dist {
namespace {

template <class T, class Op>
void tree(T* blocks, int64_t n, int64_t count, Op op) {
  // Odd groups first: group g (of `odd` blocks) is summed in order into its first block.
  int64_t odd = n, groups = 1;
  while (odd % 2 == 0) {
    odd /= 2;
    groups *= 2;
  }
  for (int64_t g = 0; g < groups; ++g) {
    T* acc = blocks + g * odd * count;
    for (int64_t j = 1; j < odd; ++j) {
      const T* x = acc + j * count;
      for (int64_t i = 0; i < count; ++i) acc[i] = op(acc[i], x[i]);
    }
  }
  // Then pairs of groups, level by level: (g0 + g1), (g2 + g3), then those two, ...
  for (int64_t step = 1; step < groups; step *= 2) {
    for (int64_t g = 0; g + step < groups; g += 2 * step) {
      T* acc = blocks + g * odd * count;
      const T* x = blocks + (g + step) * odd * count;
      for (int64_t i = 0; i < count; ++i) acc[i] = op(acc[i], x[i]);
    }
  }
}

// Integers wrap on overflow, as the IR's integer arithmetic does (no undefined behaviour).
template <class T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <class T>
void tree_kind(ReduceKind kind, T* blocks, int64_t n, int64_t count) {
  switch (kind) {
    case ReduceKind::sum:
      return tree(blocks, n, count, [](T a, T b) { return add(a, b); });
    case ReduceKind::max:
      return tree(blocks, n, count,
                  [](T a, T b) { return a != a || b != b ? a + b : std::max(a, b); });
    case ReduceKind::min:
      return tree(blocks, n, count,
                  [](T a, T b) { return a != a || b != b ? a + b : std::min(a, b); });
  }
}

}  // namespace

void combine_blocks(ReduceKind kind, DType dtype, void* blocks, int64_t n_blocks, int64_t count) {
  switch (dtype) {
    case DType::f32:
      return tree_kind(kind, static_cast<float*>(blocks), n_blocks, count);
    case DType::i32:
      return tree_kind(kind, static_cast<int32_t*>(blocks), n_blocks, count);
    case DType::i64:
      return tree_kind(kind, static_cast<int64_t*>(blocks), n_blocks, count);
    case DType::bf16: {
      auto* b = static_cast<uint16_t*>(blocks);
      std::vector<float> wide(static_cast<size_t>(n_blocks * count));
      for (size_t i = 0; i < wide.size(); ++i) wide[i] = bf16_to_f32(b[i]);
      tree_kind(kind, wide.data(), n_blocks, count);
      for (int64_t i = 0; i < count; ++i) b[i] = f32_to_bf16(wide[static_cast<size_t>(i)]);
      return;
    }
    case DType::boolean:
      break;
  }
  throw Error("[dist] collectives take numbers, not bool");
}

void reduce_scatter(Communicator& c, DType dtype, const void* in, void* out, int64_t count) {
  const auto esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t n = c.size();
  // In segments of the block, every process's piece of one segment at a time, so the staging
  // stays within kCollectiveSegmentElements whatever the tensor (ZeRO's gradients are whole
  // embeddings); the buffers persist, as all_reduce's do.
  if (n == 1) {
    if (in != out) std::memmove(out, in, static_cast<size_t>(count * esize));
    return;
  }
  const int64_t segment = backend::reduce_scatter_segment(n, count);
  const auto bytes = static_cast<size_t>(n * segment * esize);
  thread_local std::vector<std::byte> send, from_all;
  if (from_all.size() < bytes) from_all.resize(bytes);
  if (segment < count && send.size() < bytes) send.resize(bytes);
  for (int64_t start = 0; start < count; start += segment) {
    const int64_t len = std::min(segment, count - start);
    const auto piece = static_cast<size_t>(len * esize);
    const auto* src = static_cast<const std::byte*>(in);
    if (len < count) {  // else the blocks go as they are
      for (int64_t r = 0; r < n; ++r) {
        std::memcpy(send.data() + r * len * esize, src + (r * count + start) * esize, piece);
      }
      src = send.data();
    }
    c.all_to_all(src, from_all.data(), piece);
    combine_blocks(ReduceKind::sum, dtype, from_all.data(), n, len);
    std::memcpy(static_cast<std::byte*>(out) + start * esize, from_all.data(), piece);
  }
}

void all_gather(Communicator& c, DType dtype, const void* in, void* out, int64_t count) {
  c.all_gather(in, out, static_cast<size_t>(count * static_cast<int64_t>(dtype_size(dtype))));
}

void all_reduce(Communicator& c, ReduceKind kind, DType dtype, const void* in, void* out,
                int64_t count) {
  const auto esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t n = c.size();
  if (n == 1) {
    if (in != out) std::memmove(out, in, static_cast<size_t>(count * esize));
    return;
  }
  // Each segment: rank r combines slice r of every process's segment, then all gather. The
  // staging buffers persist (grown, never zero-filled again): a fresh 16 MB vector per call
  // costs its page faults and zeroing on every step.
  const int64_t segment = std::min(count, backend::kCollectiveSegmentElements);
  const int64_t slice = (segment + n - 1) / n;
  const auto bytes = static_cast<size_t>(n * slice * esize);
  thread_local std::vector<std::byte> send, from_all, gathered;
  for (auto* v : {&send, &from_all, &gathered}) {
    if (v->size() < bytes) v->resize(bytes);
  }
  for (int64_t start = 0; start < count; start += segment) {
    const int64_t len = std::min(segment, count - start);
    const std::byte* src = static_cast<const std::byte*>(in) + start * esize;
    std::byte* dst = static_cast<std::byte*>(out) + start * esize;
    const bool whole = len == n * slice;  // no padding: send from `in`, gather into `out`
    if (!whole) {
      std::fill(send.begin(), send.begin() + static_cast<std::ptrdiff_t>(bytes), std::byte{0});
      std::memcpy(send.data(), src, static_cast<size_t>(len * esize));
    }
    c.all_to_all(whole ? src : send.data(), from_all.data(), static_cast<size_t>(slice * esize));
    combine_blocks(kind, dtype, from_all.data(), n, slice);
    c.all_gather(from_all.data(), whole ? dst : gathered.data(),
                 static_cast<size_t>(slice * esize));
    if (!whole) std::memcpy(dst, gathered.data(), static_cast<size_t>(len * esize));
  }
}

}  // namespace keel::dist
