// The f32 matrix products behind dot_general, one BLAS call per batch entry. Batches run whole
// entries per OpenMP thread (OpenBLAS-openmp goes single-threaded inside a parallel region); a
// single product, or a few large ones, let OpenBLAS split each product over the same pool.
#include <climits>

#include "backend/cpu/blas_table.h"
#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

// Below this many multiply-adds per product, threads always take whole batch entries.
constexpr int64_t kSmallProduct = int64_t{1} << 22;

blasint blas_int(int64_t v, const char* what) {
  if (v > INT_MAX) fail("dot_general: {} = {} exceeds the BLAS integer range", what, v);
  return static_cast<blasint>(v);
}

}  // namespace

void gemm_blas_f32(const MatView& a, const MatView& b, float* c) {
  const int64_t batches = static_cast<int64_t>(a.off.size());
  const blasint M = blas_int(a.rows, "M"), N = blas_int(b.rows, "N"), K = blas_int(a.k, "K");
  const blasint lda = blas_int(a.ld, "lda"), ldb = blas_int(b.ld, "ldb");
  const auto ta = a.k_inner ? CblasNoTrans : CblasTrans;  // A stored M x K, else K x M
  const auto tb = b.k_inner ? CblasTrans : CblasNoTrans;  // B stored N x K, else K x N
  const BlasTable& blas = blas_table;
  if (!blas.sgemm) fail("dot_general: no BLAS library loaded (cpu client not created?)");
  auto product = [&](int64_t i) {
    const float* A = a.data + a.off[i];
    const float* B = b.data + b.off[i];
    float* C = c + i * a.rows * b.rows;
    // A matrix-vector product skips the packing sgemm would do for a single row or column.
    if (N == 1) {
      const blasint incx = b.k_inner ? 1 : ldb;
      if (a.k_inner) {
        blas.sgemv(CblasRowMajor, CblasNoTrans, M, K, 1.0f, A, lda, B, incx, 0.0f, C, 1);
      } else {
        blas.sgemv(CblasRowMajor, CblasTrans, K, M, 1.0f, A, lda, B, incx, 0.0f, C, 1);
      }
    } else if (M == 1) {
      const blasint incx = a.k_inner ? 1 : lda;
      if (b.k_inner) {
        blas.sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, B, ldb, A, incx, 0.0f, C, 1);
      } else {
        blas.sgemv(CblasRowMajor, CblasTrans, K, N, 1.0f, B, ldb, A, incx, 0.0f, C, 1);
      }
    } else {
      blas.sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
    }
  };
  // Whole entries per thread need one fork/join for the batch instead of one per product, and
  // measured 1.2-2x faster unless a few large products would leave a thread idle.
  const int64_t work = a.rows * b.rows * a.k, threads = omp_get_max_threads();
  const bool by_entry = batches > 1 && threads > 1 && !omp_in_parallel() &&
                        (work < kSmallProduct || batches % threads == 0 || batches >= 4 * threads);
  if (by_entry) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batches; ++i) product(i);
  } else {
    for (int64_t i = 0; i < batches; ++i) product(i);
  }
}

}  // namespace keel::cpu::detail
