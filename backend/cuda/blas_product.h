#pragma once
// A product as cuBLASLt takes it. keel's GemmCall is row-major (c = a b, c m x n); cuBLASLt is
// column-major, so it computes c^T (n x m) = op(x) op(y), x the storage of b and y that of a,
// each transposed or not by how it lies. The driver's GPU hands this to cuBLASLt; the emulated
// GPU runs it as written, so a wrong mapping shows against the reference interpreter.
#include <cstdint>

#include "backend/cuda/program.h"

namespace keel::cuda {

// A column-major matrix of rows x cols with leading dimension ld, transposed by the product or
// not; batch entry i starts at first + i * batch_stride elements from the operand's pointer.
struct BlasMatrix {
  int64_t rows = 1, cols = 1, ld = 1;
  bool transposed = false;
  int64_t first = 0, batch_stride = 0;
  bool operator==(const BlasMatrix&) const = default;
};

struct BlasProduct {
  int64_t m = 1, n = 1, k = 1, batch = 1;  // cuBLASLt's: m = call.n, n = call.m
  BlasMatrix x, y;                         // cuBLASLt's A (b's storage) and B (a's)
  int64_t ldc = 1;                         // c's: call.n; batch entries m * n apart
  DType operand = DType::f32, result = DType::f32;
  GemmCall::Addend addend = GemmCall::Addend::none;  // matrix: as c; row_vector: per cuBLASLt row
  GemmCall::Activation activation = GemmCall::Activation::none;
  bool aux = false;                                      // an aux matrix laid out as c (ld ldc)
  bool empty() const { return m == 0 || n == 0; }        // nothing to write
  bool zero_fill() const { return !empty() && k == 0; }  // c is zeros: cuBLASLt needs k >= 1
};

// `call` as cuBLASLt's product. Throws keel::Error "[backend.cuda] internal: ..." for a layout
// cuBLASLt cannot take (gemm_fits refuses those first).
BlasProduct blas_product(const GemmCall& call);
// Runs `p` on host memory as cuBLASLt would (f32 accumulation, the addend added to the sum
// and the activation applied before c is rounded): the emulated GPU's product. `addend` and
// `aux` are null when p has none.
void run_blas_product(const BlasProduct& p, const char* a, const char* b, char* c,
                      const char* addend = nullptr, char* aux = nullptr);

// GELU in the tanh form cuBLASLt's epilogues compute (and GPT-2 trains with), and its
// derivative.
float gelu_tanh(float x);
float gelu_tanh_gradient(float x);

}  // namespace keel::cuda
