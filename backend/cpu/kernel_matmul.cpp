// Which library runs a product, and the bf16 rounding of operands for matmul_precision = bf16.
//
// The choice, measured by bench/gemm_bench (2 threads, GFLOP/s, median of 20; Intel Xeon
// Sapphire Rapids-class KVM guest, 2 cores; OpenBLAS 0.3.21 openmp, oneDNN 2.6.3):
//
//   shape class (M x N x K, batch)            OpenBLAS   oneDNN f32   oneDNN bf16
//   see the table printed by `make bench`; the rule below follows it:
//
// oneDNN wins every GEMM class (it splits only M and N, as OpenBLAS does, so both are
// thread-count independent), while a matrix-vector product (M or N = 1) is a memory-bound
// sweep that OpenBLAS's sgemv does with less overhead. bf16 always runs on oneDNN (OpenBLAS has
// no bf16 GEMM), except where oneDNN has only its reference loop for a layout: there the
// operands are rounded to bf16 and multiplied in f32 by OpenBLAS (products of bf16 values are
// exact in f32, so only the summation order differs).
#include <atomic>

#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

std::atomic<GemmLibrary> forced{GemmLibrary::automatic};

bool is_vector(const MatView& a, const MatView& b) {
  return a.rows == 1 || b.rows == 1;
}

// bf16 bits of every element of the buffer a view reads; NaN stays NaN, ties round to even.
void to_bf16(const MatView& v, Scratch& to) {
  auto* dst = to.as<uint16_t>();
  const float* src = v.data;
  parallel_for(v.extent, v.extent, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = bf16_store(src[i]).bits;
  });
}

// f32 values of bf16-rounded elements, for the OpenBLAS fallback.
void round_f32(const MatView& v, Scratch& to) {
  auto* dst = to.as<float>();
  const float* src = v.data;
  parallel_for(v.extent, v.extent, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = bf16_load(bf16_store(src[i]));
  });
}

}  // namespace

const char* library_name(GemmLibrary lib) {
  switch (lib) {
    case GemmLibrary::automatic:
      return "automatic";
    case GemmLibrary::openblas:
      return "openblas";
    case GemmLibrary::onednn:
      return "onednn";
  }
  return "unknown";
}

void force_gemm_library(GemmLibrary lib) {
  forced = lib;
}

GemmLibrary choose_library(const MatView& a, const MatView& b, int32_t precision) {
  if (GemmLibrary f = forced; f != GemmLibrary::automatic) return f;
  if (precision == KEEL_MATMUL_F32 && is_vector(a, b)) return GemmLibrary::openblas;
  if (onednn_impl(a, b, precision == KEEL_MATMUL_BF16).rfind("ref", 0) == 0) {
    return GemmLibrary::openblas;
  }
  return GemmLibrary::onednn;
}

int64_t gemm_scratch_bytes(const MatView& a, const MatView& b, int32_t precision) {
  if (precision != KEEL_MATMUL_BF16) return 0;
  const int64_t bytes = choose_library(a, b, precision) == GemmLibrary::onednn ? 2 : 4;
  return (a.extent + b.extent) * bytes + 128;
}

void gemm(const MatView& a, const MatView& b, float* c, int32_t precision, GemmLibrary lib) {
  if (precision != KEEL_MATMUL_F32 && precision != KEEL_MATMUL_BF16) {
    fail("dot_general: precision {} is not KEEL_MATMUL_F32 (0) or KEEL_MATMUL_BF16 (1)", precision);
  }
  if (lib == GemmLibrary::automatic) lib = choose_library(a, b, precision);
  const bool bf16 = precision == KEEL_MATMUL_BF16;
  if (lib == GemmLibrary::onednn) {
    if (!bf16) {
      if (gemm_onednn(a, b, c, nullptr, nullptr)) return;
    } else {
      Scratch sa(static_cast<size_t>(a.extent) * 2), sb(static_cast<size_t>(b.extent) * 2);
      to_bf16(a, sa);
      to_bf16(b, sb);
      if (gemm_onednn(a, b, c, sa.as<uint16_t>(), sb.as<uint16_t>())) return;
    }
  }
  if (!bf16) return gemm_blas_f32(a, b, c);
  Scratch sa(static_cast<size_t>(a.extent) * 4), sb(static_cast<size_t>(b.extent) * 4);
  round_f32(a, sa);
  round_f32(b, sb);
  MatView ra = a, rb = b;
  ra.data = sa.as<float>();
  rb.data = sb.as<float>();
  gemm_blas_f32(ra, rb, c);
}

}  // namespace keel::cpu::detail
