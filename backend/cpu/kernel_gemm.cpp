// The f32 matrix products behind dot_general on OpenBLAS. OpenBLAS 0.3.21 gives different bytes
// at 3 threads than at 1 on GEMM shapes here (cpu_matmul_test), so with fixed_tiles every
// product is cut into tiles of kTileRows output rows (columns when M = 1), and into column
// panels when there are few, fixed by the shape, each computed by one single-threaded call
// (OpenBLAS-openmp runs single-threaded inside a parallel region or a one-thread team), the tiles
// spread over the OpenMP team: the result no longer depends on the thread count. gemm_bench
// measures what that costs.
#include <algorithm>
#include <climits>

#include "backend/cpu/blas_table.h"
#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

blasint blas_int(int64_t v, const char* what) {
  if (v > INT_MAX) fail("dot_general: {} = {} exceeds the BLAS integer range", what, v);
  return static_cast<blasint>(v);
}

// C (m x n, row stride ldc) = A (m x K) B (n x K)^T on the views' layouts; A and B point at the
// first row of the tile.
void product(const BlasTable& blas, const MatView& a, const MatView& b, const float* A,
             const float* B, float* C, blasint m, blasint n, blasint ldc) {
  const blasint K = blas_int(a.k, "K");
  const blasint lda = blas_int(a.ld, "lda"), ldb = blas_int(b.ld, "ldb");
  // A matrix-vector product skips the packing sgemm would do for a single row or column.
  if (n == 1 && b.rows == 1) {
    const blasint incx = b.k_inner ? 1 : ldb;
    if (a.k_inner) {
      blas.sgemv(CblasRowMajor, CblasNoTrans, m, K, 1.0f, A, lda, B, incx, 0.0f, C, ldc);
    } else {
      blas.sgemv(CblasRowMajor, CblasTrans, K, m, 1.0f, A, lda, B, incx, 0.0f, C, ldc);
    }
  } else if (m == 1 && a.rows == 1) {
    const blasint incx = a.k_inner ? 1 : lda;
    if (b.k_inner) {
      blas.sgemv(CblasRowMajor, CblasNoTrans, n, K, 1.0f, B, ldb, A, incx, 0.0f, C, 1);
    } else {
      blas.sgemv(CblasRowMajor, CblasTrans, K, n, 1.0f, B, ldb, A, incx, 0.0f, C, 1);
    }
  } else {
    const auto ta = a.k_inner ? CblasNoTrans : CblasTrans;  // A stored m x K, else K x m
    const auto tb = b.k_inner ? CblasTrans : CblasNoTrans;  // B stored n x K, else K x n
    blas.sgemm(CblasRowMajor, ta, tb, m, n, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
  }
}

// Where row `r` of a view (a column of b) starts.
int64_t row_offset(const MatView& v, int64_t r) {
  return v.k_inner ? r * v.ld : r;
}

}  // namespace

void gemm_blas_f32(const MatView& a, const MatView& b, float* c, bool fixed_tiles) {
  const BlasTable& blas = blas_table;
  if (!blas.sgemm) fail("dot_general: no BLAS library loaded (cpu client not created?)");
  const int64_t batches = static_cast<int64_t>(a.off.size());
  const int64_t M = a.rows, N = b.rows;
  const blasint ldc = blas_int(N, "N");
  blas_int(M, "M");
  if (!fixed_tiles) {  // OpenBLAS splits each product over the team as it likes
    for (int64_t i = 0; i < batches; ++i) {
      product(blas, a, b, a.data + a.off[i], b.data + b.off[i], c + i * M * N,
              static_cast<blasint>(M), static_cast<blasint>(N), ldc);
    }
    return;
  }
  const Tiling t = tiling(batches, M, N);
  for_each_tile(batches * t.per_batch(), [&](int64_t u) {
    const int64_t i = u / t.per_batch(), r0 = u % t.per_batch() / t.col_tiles() * t.rows,
                  c0 = u % t.col_tiles() * t.cols;
    const auto m = static_cast<blasint>(std::min(t.rows, M - r0));
    const auto n = static_cast<blasint>(std::min(t.cols, N - c0));
    product(blas, a, b, a.data + a.off[i] + row_offset(a, r0),
            b.data + b.off[i] + row_offset(b, c0), c + i * M * N + r0 * N + c0, m, n, ldc);
  });
}

}  // namespace keel::cpu::detail
