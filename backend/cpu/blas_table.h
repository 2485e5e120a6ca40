#pragma once
// The CBLAS entry points the GEMM kernels call, filled by load_blas. The enum types come from
// cblas.h; nothing is linked against it.
#include <cblas.h>

namespace keel::cpu::detail {

struct BlasTable {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_sgemv) sgemv = nullptr;
  void (*set_threads)(int) = nullptr;
};

extern BlasTable blas_table;

}  // namespace keel::cpu::detail
