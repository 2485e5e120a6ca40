#pragma once
// Internal to dot_general: an operand seen as B matrices of rows x K, which is what BLAS takes.
#include <cstdint>
#include <vector>

namespace keel::cpu::detail {

// Element (b, row, k) sits at data + off[b] + (k_inner ? row * ld + k : k * ld + row).
struct MatView {
  const float* data = nullptr;
  std::vector<int64_t> off;  // one offset per batch entry, in output batch order
  int64_t rows = 1, k = 1;
  bool k_inner = true;
  int64_t ld = 1;
};

// c[b] (M x N, row-major, contiguous) = a[b] (M x K) times b[b] (N x K) transposed, for every
// batch entry, through cblas_sgemm (or cblas_sgemv when M or N is 1). K >= 1.
void gemm_f32(const MatView& a, const MatView& b, float* c);

}  // namespace keel::cpu::detail
