// Layout kernels: transpose, broadcast, slice and concat as strided copies; pad row by row; copy as
// a (parallel) memcpy. Elements move bit for bit, so only the element size matters.
#include <algorithm>

#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_strided.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

// The layout kernels read a strided input (a folded view that cannot fold further).
void check_unary(const keel_view& in, const keel_view& out, const char* op) {
  check_view(in, op, "input", /*strided_ok=*/true);
  check_view(out, op, "output");
  check_same_dtype(in, out, op);
}

void check_shape(bool ok, const char* op, const keel_view& in, const keel_view& out) {
  if (!ok) fail("{}: input {} does not give output {}", op, view_str(in), view_str(out));
}

// Copies n bytes in parallel chunks of at least 1 MB.
void parallel_memcpy(std::byte* dst, const std::byte* src, int64_t n) {
  constexpr int64_t chunk = 1 << 20;
  parallel_for((n + chunk - 1) / chunk, n / 4, [&](int64_t begin, int64_t end) {
    const int64_t lo = begin * chunk, hi = std::min(n, end * chunk);
    std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo));
  });
}

void input_strides(const keel_view& in, int64_t* out) {
  if (in.strided) {
    std::copy(in.stride, in.stride + in.rank, out);
  } else {
    row_major_strides(in.shape, in.rank, out);
  }
}

template <class T>
void pad_rows(const keel_view& in, keel_view& out, const int64_t* low, T value) {
  const T* src = static_cast<const T*>(in.data);
  T* dst = static_cast<T*>(out.data);
  const int r = out.rank;
  if (r == 0) {
    *dst = *src;
    return;
  }
  int64_t in_strides[KEEL_MAX_RANK];
  row_major_strides(in.shape, r, in_strides);
  const int64_t len = out.shape[r - 1], lo = low[r - 1], n_in = in.shape[r - 1];
  const int64_t total = numel(out);
  parallel_for(total / len, total, [&](int64_t begin, int64_t end) {
    int64_t idx[KEEL_MAX_RANK] = {};
    for (int64_t row = begin; row < end; ++row) {
      int64_t rest = row, soff = 0;
      bool inside = true;
      for (int d = r - 1; d-- > 0;) {
        idx[d] = rest % out.shape[d];
        rest /= out.shape[d];
        const int64_t at = idx[d] - low[d];
        inside = inside && at >= 0 && at < in.shape[d];
        soff += at * in_strides[d];
      }
      T* d = dst + row * len;
      if (!inside || n_in == 0) {
        std::fill(d, d + len, value);
        continue;
      }
      std::fill(d, d + lo, value);
      std::memcpy(d + lo, src + soff, static_cast<size_t>(n_in) * sizeof(T));
      std::fill(d + lo + n_in, d + len, value);
    }
  });
}

}  // namespace

void transpose(const keel_view* in, keel_view* out, const int64_t* perm) {
  check_unary(*in, *out, "transpose");
  bool ok = in->rank == out->rank;
  std::vector<bool> seen(static_cast<size_t>(in->rank), false);
  for (int32_t d = 0; ok && d < in->rank; ++d) {
    ok =
        perm[d] >= 0 && perm[d] < in->rank && !seen[perm[d]] && out->shape[d] == in->shape[perm[d]];
    if (ok) seen[perm[d]] = true;
  }
  check_shape(ok, "transpose", *in, *out);
  StridedCopy c;
  c.rank = in->rank;
  int64_t in_strides[KEEL_MAX_RANK];
  input_strides(*in, in_strides);
  for (int d = 0; d < c.rank; ++d) {
    c.shape[d] = in->shape[perm[d]];
    c.src_stride[d] = in_strides[perm[d]];
  }
  row_major_strides(c.shape, c.rank, c.dst_stride);
  strided_copy(out->data, in->data, elem_size(*in), c);
}

void broadcast(const keel_view* in, keel_view* out) {
  check_unary(*in, *out, "broadcast");
  const int lead = out->rank - in->rank;
  bool ok = lead >= 0;
  StridedCopy c;
  c.rank = out->rank;
  int64_t in_strides[KEEL_MAX_RANK];
  input_strides(*in, in_strides);
  for (int d = 0; ok && d < out->rank; ++d) {
    c.shape[d] = out->shape[d];
    if (d < lead) continue;
    const int64_t n = in->shape[d - lead];
    ok = n == 1 || n == out->shape[d];
    c.src_stride[d] = n == 1 ? 0 : in_strides[d - lead];
  }
  check_shape(ok, "broadcast", *in, *out);
  row_major_strides(c.shape, c.rank, c.dst_stride);
  strided_copy(out->data, in->data, elem_size(*in), c);
}

void slice(const keel_view* in, keel_view* out, const int64_t* start, const int64_t* stride) {
  check_unary(*in, *out, "slice");
  bool ok = in->rank == out->rank;
  StridedCopy c;
  c.rank = out->rank;
  int64_t in_strides[KEEL_MAX_RANK];
  input_strides(*in, in_strides);
  int64_t base = 0;
  for (int d = 0; ok && d < out->rank; ++d) {
    const int64_t n = out->shape[d];
    ok = start[d] >= 0 && stride[d] >= 1 &&
         (n == 0 || start[d] + (n - 1) * stride[d] < in->shape[d]);
    c.shape[d] = n;
    c.src_stride[d] = in_strides[d] * stride[d];
    base += start[d] * in_strides[d];
  }
  check_shape(ok, "slice", *in, *out);
  if (numel(*out) == 0) return;
  row_major_strides(c.shape, c.rank, c.dst_stride);
  const size_t es = elem_size(*in);
  strided_copy(out->data, static_cast<const std::byte*>(in->data) + base * es, es, c);
}

// Each piece is a [outer, n_i * inner] block landing at a running column offset of the output.
void concat(const keel_view* const* ins, int32_t n, keel_view* out, int32_t axis) {
  check_view(*out, "concat", "output");
  if (n < 1 || axis < 0 || axis >= out->rank) {
    fail("concat: {} inputs along axis {} into {}", n, axis, view_str(*out));
  }
  int64_t outer = 1, inner = 1, total = 0;
  for (int d = 0; d < axis; ++d) outer *= out->shape[d];
  for (int d = axis + 1; d < out->rank; ++d) inner *= out->shape[d];
  for (int32_t i = 0; i < n; ++i) {
    const keel_view& p = *ins[i];
    check_view(p, "concat", "input", /*strided_ok=*/true);
    check_same_dtype(p, *out, "concat");
    bool ok = p.rank == out->rank;
    for (int d = 0; ok && d < p.rank; ++d) ok = d == axis || p.shape[d] == out->shape[d];
    check_shape(ok, "concat", p, *out);
    total += p.shape[axis];
  }
  if (total != out->shape[axis]) {
    fail("concat: inputs add up to {} along axis {} but the output {} has {}", total, axis,
         view_str(*out), out->shape[axis]);
  }
  const size_t es = elem_size(*out);
  if (outer == 0 || inner == 0 || total == 0) return;  // an empty output: nothing to copy
  int64_t offset = 0;
  for (int32_t i = 0; i < n; ++i) {
    const int64_t cols = ins[i]->shape[axis] * inner;
    if (cols == 0) continue;  // an empty piece may have a null data pointer
    if (ins[i]->strided) {    // a folded view: walk its own dims
      StridedCopy c;
      c.rank = out->rank;
      row_major_strides(out->shape, out->rank, c.dst_stride);
      for (int d = 0; d < c.rank; ++d) {
        c.shape[d] = ins[i]->shape[d];
        c.src_stride[d] = ins[i]->stride[d];
      }
      strided_copy(static_cast<std::byte*>(out->data) + offset * inner * es, ins[i]->data, es, c);
      offset += ins[i]->shape[axis];
      continue;
    }
    StridedCopy c;
    c.rank = 2;
    c.shape[0] = outer;
    c.shape[1] = cols;
    c.dst_stride[0] = total * inner;
    c.dst_stride[1] = 1;
    c.src_stride[0] = cols;
    c.src_stride[1] = 1;
    strided_copy(static_cast<std::byte*>(out->data) + offset * inner * es, ins[i]->data, es, c);
    offset += ins[i]->shape[axis];
  }
}

void pad(const keel_view* in, keel_view* out, const int64_t* low, double value) {
  check_unary(*in, *out, "pad");
  bool ok = in->rank == out->rank;
  for (int d = 0; ok && d < in->rank; ++d) {
    ok = low[d] >= 0 && in->shape[d] + low[d] <= out->shape[d];
  }
  check_shape(ok, "pad", *in, *out);
  if (numel(*out) == 0) return;
  dispatch(out->dtype, [&](auto t) {
    using T = decltype(t);
    pad_rows<T>(*in, *out, low, from_double<T>(value));
  });
}

void copy(const keel_view* in, keel_view* out) {
  check_unary(*in, *out, "copy");
  if (numel(*in) != numel(*out)) {
    fail("copy: input {} and output {} differ in element count", view_str(*in), view_str(*out));
  }
  if (in->strided) {  // a reshape of a view that is not row-major: gather it in order
    StridedCopy c;
    c.rank = in->rank;
    for (int d = 0; d < c.rank; ++d) {
      c.shape[d] = in->shape[d];
      c.src_stride[d] = in->stride[d];
    }
    row_major_strides(c.shape, c.rank, c.dst_stride);
    strided_copy(out->data, in->data, elem_size(*in), c);
    return;
  }
  parallel_memcpy(static_cast<std::byte*>(out->data), static_cast<const std::byte*>(in->data),
                  numel(*in) * static_cast<int64_t>(elem_size(*in)));
}

}  // namespace keel::cpu::detail
