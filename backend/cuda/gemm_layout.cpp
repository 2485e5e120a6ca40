#include <algorithm>

#include "backend/cuda/program.h"

namespace keel::cuda {

bool GemmCall::blas_layout(const MatrixLayout& l) {
  if (l.batch_offsets.size() > 2) {
    const int64_t step = l.batch_offsets[1] - l.batch_offsets[0];
    for (size_t b = 2; b < l.batch_offsets.size(); ++b) {
      if (l.batch_offsets[b] - l.batch_offsets[b - 1] != step) return false;
    }
  }
  if (l.rows == 1 || l.cols == 1) return true;
  return (l.col_stride == 1 && l.row_stride >= l.cols) ||
         (l.row_stride == 1 && l.col_stride >= l.rows);
}

namespace {

// Elements from a layout's first to its last, inclusive (0 for an empty matrix).
int64_t span(const MatrixLayout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  int64_t last = 0;
  for (int64_t o : l.batch_offsets) last = std::max(last, o);
  return last + (l.rows - 1) * l.row_stride + (l.cols - 1) * l.col_stride + 1;
}

}  // namespace

int64_t bytes_after(const CudaProgram& p, const Slot& s) {
  switch (s.kind) {
    case Slot::Kind::input:
      return p.inputs.at(static_cast<size_t>(s.index)).bytes() - s.byte_offset;
    case Slot::Kind::output:
      return p.outputs.at(static_cast<size_t>(s.index)).bytes() - s.byte_offset;
    case Slot::Kind::arena:
      return p.arena_bytes - s.byte_offset;
  }
  return 0;
}

namespace {

// GELU and its gradient: one f32 matrix; the aux matrix (the pre-activation) at the plan's
// alignment with a leading dimension divisible by 8, as cuBLASLt's GELU epilogues need, inside
// its buffer and apart from every other argument. The gradient reads aux and adds nothing; gelu
// adds at most a bias.
bool activation_fits(const CudaProgram& p, const Launch& l) {
  const GemmCall& c = *l.gemm;
  using Activation = GemmCall::Activation;
  if (c.activation == Activation::none) return !c.aux;
  if (c.batch != 1 || c.result != DType::f32) return false;
  if (c.activation == Activation::gelu_gradient && (!c.aux || c.addend != GemmCall::Addend::none)) {
    return false;
  }
  if (c.activation == Activation::gelu && c.addend == GemmCall::Addend::matrix) return false;
  if (!c.aux) return true;
  const Slot& aux = l.args.back();
  const int64_t bytes = c.m * c.n * 4;
  if (c.n % 8 != 0 || aux.byte_offset % GemmCall::kAuxAlignment != 0 ||
      bytes > bytes_after(p, aux)) {
    return false;
  }
  const auto esize = static_cast<int64_t>(dtype_size(c.operand));
  const int64_t spans[] = {span(c.a) * esize, span(c.b) * esize, bytes, c.n * 4};
  for (size_t i = 0; i + 1 < l.args.size(); ++i) {
    const Slot& other = l.args[i];
    if (other.kind == aux.kind && other.index == aux.index &&
        aux.byte_offset < other.byte_offset + spans[i] &&
        other.byte_offset < aux.byte_offset + bytes) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool gemm_fits(const CudaProgram& p, const Launch& l) {
  if (!l.gemm) return false;
  const GemmCall& c = *l.gemm;
  if (l.args.size() != c.buffers()) return false;
  // cuBLASLt needs k >= 1 to add or apply anything.
  if ((c.addend != GemmCall::Addend::none || c.activation != GemmCall::Activation::none) &&
      c.k == 0) {
    return false;
  }
  if (!activation_fits(p, l)) return false;
  // A bias: one vector for one matrix, 16-byte aligned. A matrix addend: C is D or apart from it.
  if (c.addend == GemmCall::Addend::row_vector &&
      (c.batch != 1 || l.args[3].byte_offset % 16 != 0)) {
    return false;
  }
  if (c.addend == GemmCall::Addend::matrix && l.args[3] != l.args[2] &&
      l.args[3].kind == l.args[2].kind && l.args[3].index == l.args[2].index) {
    const int64_t bytes = c.batch * c.m * c.n * static_cast<int64_t>(dtype_size(c.result));
    if (l.args[3].byte_offset < l.args[2].byte_offset + bytes &&
        l.args[2].byte_offset < l.args[3].byte_offset + bytes) {
      return false;
    }
  }
  const bool sizes = c.batch >= 1 && c.m >= 0 && c.n >= 0 && c.k >= 0 && c.a.rows == c.m &&
                     c.a.cols == c.k && c.b.rows == c.k && c.b.cols == c.n &&
                     static_cast<int64_t>(c.a.batch_offsets.size()) == c.batch &&
                     static_cast<int64_t>(c.b.batch_offsets.size()) == c.batch &&
                     c.m < (int64_t{1} << 31) && c.n < (int64_t{1} << 31) &&
                     c.k < (int64_t{1} << 31) && c.batch < (int64_t{1} << 31);
  if (!sizes || !GemmCall::blas_layout(c.a) || !GemmCall::blas_layout(c.b)) return false;
  for (const MatrixLayout* m : {&c.a, &c.b}) {
    if (m->row_stride < 0 || m->col_stride < 0) return false;
    for (int64_t o : m->batch_offsets) {
      if (o < 0) return false;
    }
  }
  const auto esize = static_cast<int64_t>(dtype_size(c.operand));
  const auto rsize = static_cast<int64_t>(dtype_size(c.result));
  const int64_t addend = c.addend == GemmCall::Addend::matrix       ? c.batch * c.m * c.n
                         : c.addend == GemmCall::Addend::row_vector ? c.n
                                                                    : 0;
  return span(c.a) * esize <= bytes_after(p, l.args[0]) &&
         span(c.b) * esize <= bytes_after(p, l.args[1]) &&
         c.batch * c.m * c.n * rsize <= bytes_after(p, l.args[2]) &&
         (addend == 0 || addend * rsize <= bytes_after(p, l.args[3]));
}

}  // namespace keel::cuda
