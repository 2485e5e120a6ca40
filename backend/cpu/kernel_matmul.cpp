// Which library runs a product, and the bf16 rounding of operands for matmul_precision = bf16.
//
// The choice, from bench/gemm_bench (2 threads, GFLOP/s, median of 7; Intel Xeon (Sapphire
// Rapids-class KVM guest, avx512_bf16, no AMX exposed), 2 cores shared with other jobs at load
// 4-8, so absolute figures are low and noisy; OpenBLAS 0.3.21 openmp picks its Prescott kernels
// on this CPU; oneDNN 2.6.3 runs brg:avx512_core / brg:avx512_core_bf16):
//
//   gpt2-s class (B, M x N x K)          OpenBLAS tiles / threaded   oneDNN f32   oneDNN bf16*
//   qkv fwd      1, 2048 x 1152 x 384          7.6 /  8.7               37.7         15.1
//   qkv dW       1, 384 x 1152 x 2048 (A^T)    5.6 /  6.7               37.8         12.6
//   fc dX        1, 2048 x 384 x 1536 (B^T)    8.9 /  7.4               33.6         15.9
//   fc-proj fwd  1, 2048 x 384 x 1536         18.9 / 18.3               89.1         31.6
//   attn QK^T   48, 256 x 256 x 64 (B^T)       7.8 /  0.3               16.8          5.7
//   attn PV     48, 256 x 64 x 256             6.4 /  0.2               20.3          4.9
//   gpt2-m fc-proj fwd 1, 1024 x 768 x 3072   13.9 / 11.3              124.7         60.4
//   mat-vec M=1  1, 1 x 3072 x 768             0.6 /  9.1               18.4          0.7
//   mat-vec N=1  1, 1024 x 1 x 768            10.6 / 10.7               11.8          1.5
//   (* bf16 includes rounding both f32 operands, as a step pays it; `make bench` prints all
//   23 classes per model.) On a quieter run the same day: qkv fwd 10.6 / 53.4 / 25.2, M=1
//   11.0 / 38.8, N=1 16.4 / 16.4 (OpenBLAS / oneDNN f32 / bf16).
//
// That table was taken while OpenBLAS ran its Prescott (SSE3) fallback. Since keel names the
// core from the ISA (blas.cpp), OpenBLAS's tiles measured (gemm_bench, idle host) 194-277 GFLOP/s
// against oneDNN f32's 238-337 on gpt2-s's classes, but beat it on gpt2-m's fc dW (270 vs 105),
// qkv fwd/dW and the matrix-vector products: a per-class choice from that table is still to do.
// So f32 runs on oneDNN in every class (matrix-vector included: faster or level), and bf16
// always does (OpenBLAS has no bf16 GEMM). On AVX2 hosts oneDNN 2.6 has gemm:jit, which splits
// K over the team, so it runs in fixed one-thread tiles there (kernel_dot.h), and no bf16.
// There the larger weight gradients go to OpenBLAS's tiles (the second table: AMD EPYC Zen3,
// AVX2, 2 threads, idle, gemm_bench --reps 7, medians of 4 runs; both libraries in fixed
// one-thread tiles; weight gradients X^T dY, M x N outputs over K tokens):
//
//   class (M x N x K)                  OpenBLAS tiles  oneDNN tiles  outputs
//   gpt2-m fc       768 x 3072 x 1024      125.0          58.8        2.4M   OpenBLAS
//   gpt2-m fc-proj 3072 x  768 x 1024      120.7          68.2        2.4M   OpenBLAS
//   gpt2-m qkv      768 x 2304 x 1024      124.2         117.3        1.8M   OpenBLAS
//   gpt2-s fc       384 x 1536 x 2048      122.9          88.9        590K   OpenBLAS
//   gpt2-s fc-proj 1536 x  384 x 2048      114.0          94.7        590K   OpenBLAS
//   gpt2-m attn-proj 768 x 768 x 1024      120.2         117.4        590K   OpenBLAS
//   gpt2-s qkv      384 x 1152 x 2048      122.1         120.7        442K   oneDNN
//   gpt2-m lm-head  768 x  256 x 1024      126.7         103.4        197K   oneDNN
//   gpt2-s attn-proj 384 x 384 x 2048      101.3         120.0        147K   oneDNN
//   gpt2-s lm-head  384 x  256 x 2048      105.2         116.5         98K   oneDNN
//
// (single runs swing by a third on this shared host). The forward and dX classes were level
// within that noise, and the batched attention products (K-major A included) stay on oneDNN.
// OpenBLAS remains for layouts oneDNN has only its reference loop for; there bf16 operands are
// rounded and multiplied in f32 (products of bf16 values are exact in f32, so only the summation
// order differs from a bf16 GEMM).
#include <algorithm>
#include <atomic>

#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/kernel_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "backend/cpu/simd_transpose.h"
#define KEEL_SIMD_TRANSPOSE 1
#endif

namespace keel::cpu::detail {
namespace {

std::atomic<GemmLibrary> forced{GemmLibrary::automatic};

// oneDNN has a real product here: not its reference loop, and not none. (Its AVX-512 brgemm
// kernels keep each output's sum over K on one thread; gemm:jit (AVX2) and AMX's brgemm split K
// over the team, so gemm_onednn runs those in fixed one-thread tiles.)
bool onednn_runs(const std::string& impl) {
  return impl.rfind("ref", 0) != 0 && impl.rfind("none", 0) != 0;
}
bool onednn_runs(const MatView& a, const MatView& b, int32_t precision) {
  return onednn_runs(onednn_impl(a, b, precision == KEEL_MATMUL_BF16));
}

// A weight gradient (X^T dY: one product whose A is read K-major) of at least 2^19 outputs,
// on a host whose oneDNN has no brgemm (AVX2: every product there runs gemm:jit in one-thread
// tiles): OpenBLAS's tiles were level to 2x faster there (the second table above); on smaller
// ones neither was ahead on every class. Where brgemm exists, a wide one's column panels run
// gemm:jit tiles too, but those beat OpenBLAS's (gpt2-m's qkv and fc dW: 252-275 against
// 222-228 GFLOP/s on the AMX host, 2026-11-27).
bool tiled_weight_gradient(const MatView& a, const MatView& b) {
  return !a.k_inner && a.off.size() == 1 && a.rows * b.rows >= (int64_t{1} << 19) &&
         !onednn_has_brgemm();
}

// bf16 bits of every element of the buffer a view reads.
void to_bf16(const MatView& v, Scratch& to) {
  auto* dst = to.as<uint16_t>();
  const float* src = v.data;
  parallel_for(v.extent, v.extent,
               [&](int64_t b, int64_t e) { bf16_round_bits(src + b, e - b, dst + b); });
}

// The view of a row-major bf16 copy of a (each entry M x K, K innermost, entries one after
// another): data stays a's, since a bf16 product reads only the copy.
MatView row_major(const MatView& a) {
  MatView t = a;
  t.k_inner = true;
  t.ld = a.k;
  for (size_t i = 0; i < t.off.size(); ++i) t.off[i] = static_cast<int64_t>(i) * a.rows * a.k;
  t.extent = static_cast<int64_t>(t.off.size()) * a.rows * a.k;
  return t;
}

constexpr int64_t kB = 64;  // bf16_rows' blocks

#ifdef KEEL_SIMD_TRANSPOSE
// A 32 x 32 corner of src[k][m] (rows at src_ld) as rows m of out (at ld): pairs of k rows
// interleaved into words (unpack works within 128-bit lanes: word 4l + t of the low half is
// m = 8l + t, of the high half m = 8l + 4 + t), then each half's 16 x 16 words transposed.
KEEL_AVX512_TARGET void corner_transposed(const uint16_t* src, int64_t src_ld, int64_t m0,
                                          int64_t k0, uint16_t* out, int64_t ld) {
  __m512 lo[16], hi[16];
  for (int j = 0; j < 16; ++j) {
    const __m512i even = _mm512_loadu_si512(src + (k0 + 2 * j) * src_ld + m0),
                  odd = _mm512_loadu_si512(src + (k0 + 2 * j + 1) * src_ld + m0);
    lo[j] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(even, odd));
    hi[j] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(even, odd));
  }
  transpose16(lo);
  transpose16(hi);
  for (int w = 0; w < 16; ++w) {
    const int64_t m = m0 + w / 4 * 8 + w % 4;
    _mm512_storeu_ps(out + m * ld + k0, lo[w]);
    _mm512_storeu_ps(out + (m + 4) * ld + k0, hi[w]);
  }
}
#endif

// Whether whole kB x kB blocks are transposed by AVX-512 here.
bool simd_blocks() {
#ifdef KEEL_SIMD_TRANSPOSE
  static const bool avx512 = __builtin_cpu_supports("avx512bw");
  return avx512;
#else
  return false;
#endif
}

// src[k][m] (ks x ms of it, rows at src_ld) as rows m of out at ld: whole blocks by AVX-512
// where the CPU has it (a scalar walk down the block's columns was 2 % of a gpt2-s bf16 step).
void write_transposed(const uint16_t* src, int64_t src_ld, int64_t ms, int64_t ks, uint16_t* out,
                      int64_t ld) {
#ifdef KEEL_SIMD_TRANSPOSE
  if (simd_blocks() && ms == kB && ks == kB) {
    for (int64_t m0 = 0; m0 < kB; m0 += 32) {
      for (int64_t k0 = 0; k0 < kB; k0 += 32) corner_transposed(src, src_ld, m0, k0, out, ld);
    }
    return;
  }
#endif
  for (int64_t m = 0; m < ms; ++m) {
    for (int64_t k = 0; k < ks; ++k) out[m * ld + k] = src[k * src_ld + m];
  }
}

// The bf16 bits of a K-major a in row_major(a)'s layout, in 64 x 64 blocks: each k row of a
// block is read (row(offset, m, into) fills m bits from element `offset` on) as a contiguous
// run, then the block is written out k-innermost. Where a's bits exist already (`bits`), whole
// blocks are transposed straight from them: their copy through the block was 2.5 % of a gpt2-s
// bf16 step.
template <class Row>
void bf16_rows(const MatView& a, Scratch& to, const Row& row, const uint16_t* bits = nullptr) {
  auto* dst = to.as<uint16_t>();
  const int64_t M = a.rows, K = a.k, mb = (M + kB - 1) / kB, kb = (K + kB - 1) / kB;
  const int64_t blocks = static_cast<int64_t>(a.off.size()) * mb * kb;
  parallel_for(blocks, blocks * kB * kB, [&](int64_t first, int64_t last) {
    uint16_t block[kB * kB];  // flat: write_transposed walks all of it from one pointer
    for (int64_t u = first; u < last; ++u) {
      const int64_t i = u / (mb * kb), m0 = u % (mb * kb) / kb * kB, k0 = u % kb * kB;
      const int64_t ms = std::min(kB, M - m0), ks = std::min(kB, K - k0);
      const int64_t base = a.off[static_cast<size_t>(i)];
      uint16_t* out = dst + i * M * K + m0 * K + k0;
      if (bits && ms == kB && ks == kB && simd_blocks()) {
        write_transposed(bits + base + k0 * a.ld + m0, a.ld, ms, ks, out, K);
        continue;
      }
      for (int64_t k = 0; k < ks; ++k) row(base + (k0 + k) * a.ld + m0, ms, block + k * kB);
      write_transposed(block, kB, ms, ks, out, K);
    }
  });
}

// to_bf16 into row_major(a)'s layout.
void to_bf16_rows(const MatView& a, Scratch& to) {
  bf16_rows(a, to, [&](int64_t off, int64_t m, uint16_t* into) {
    bf16_round_bits(a.data + off, m, into);
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

// A row tile of a K-major A (a weight gradient's x^T) is strided, which sends oneDNN 2.6 to
// its slower gemm:jit: where the row-major copy's tiles run on AMX's brgemm, gemm makes that copy.
bool bf16_copies_a_row_major(const MatView& a, const MatView& b) {
  if (a.k_inner || a.rows <= 1) return false;
  return onednn_tile_impl(row_major(a), b, true).find("amx") != std::string::npos;
}

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
  const std::string impl = onednn_impl(a, b, precision == KEEL_MATMUL_BF16);
  if (!onednn_runs(impl)) return GemmLibrary::openblas;
  if (precision == KEEL_MATMUL_F32 && tiled_weight_gradient(a, b)) return GemmLibrary::openblas;
  return GemmLibrary::onednn;
}

void gemm_bf16(const MatView& a, const uint16_t* a16, const MatView& b, const uint16_t* b16,
               float* c) {
  if (choose_library(a, b, KEEL_MATMUL_BF16) == GemmLibrary::onednn &&
      onednn_runs(a, b, KEEL_MATMUL_BF16)) {
    if (!bf16_copies_a_row_major(a, b)) {
      if (gemm_onednn(a, b, c, a16, b16)) return;
    } else {
      const MatView rows = row_major(a);
      Scratch sa(static_cast<size_t>(rows.extent) * 2);
      bf16_rows(
          a, sa,
          [&](int64_t off, int64_t m, uint16_t* into) {
            std::copy(a16 + off, a16 + off + m, into);
          },
          a16);
      if (gemm_onednn(rows, b, c, sa.as<uint16_t>(), b16)) return;
    }
  }
  // OpenBLAS on the exactly widened operands: products of bf16 values are exact in f32.
  auto widened = [](const MatView& v, const uint16_t* v16, Scratch& to) {
    MatView w = v;
    w.data = to.as<float>();
    parallel_for(v.extent, v.extent, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) to.as<float>()[i] = bf16_load(bf16_t{v16[i]});
    });
    return w;
  };
  Scratch fa(static_cast<size_t>(a.extent) * 4), fb(static_cast<size_t>(b.extent) * 4);
  gemm_blas_f32(widened(a, a16, fa), widened(b, b16, fb), c);
}

int64_t gemm_bf16_scratch_bytes(const MatView& a, const MatView& b) {
  if (a.off.empty() || a.rows == 0 || b.rows == 0 || a.k == 0) return 0;  // dot_general skips it
  if (choose_library(a, b, KEEL_MATMUL_BF16) != GemmLibrary::onednn)
    return (a.extent + b.extent) * 4 + 128;
  if (!bf16_copies_a_row_major(a, b)) return onednn_packed_weights_bytes(a, b, true);
  const MatView rows = row_major(a);
  return rows.extent * 2 + 64 + onednn_packed_weights_bytes(rows, b, true);
}

int64_t gemm_scratch_bytes(const MatView& a, const MatView& b, int32_t precision) {
  if (precision != KEEL_MATMUL_BF16) return 0;
  if (a.off.empty() || a.rows == 0 || b.rows == 0 || a.k == 0) return 0;  // dot_general skips it
  if (choose_library(a, b, precision) != GemmLibrary::onednn)
    return (a.extent + b.extent) * 4 + 128;
  const bool rows = bf16_copies_a_row_major(a, b);
  const int64_t a_copy = rows ? row_major(a).extent : a.extent;
  return (a_copy + b.extent) * 2 + 128 +
         onednn_packed_weights_bytes(rows ? row_major(a) : a, b, true);
}

void gemm(const MatView& a, const MatView& b, float* c, int32_t precision, GemmLibrary lib) {
  if (precision != KEEL_MATMUL_F32 && precision != KEEL_MATMUL_BF16) {
    fail("dot_general: precision {} is not KEEL_MATMUL_F32 (0) or KEEL_MATMUL_BF16 (1)", precision);
  }
  if (lib == GemmLibrary::automatic) lib = choose_library(a, b, precision);
  const bool bf16 = precision == KEEL_MATMUL_BF16;
  // Forced (tests, benches) too, oneDNN without a product falls back before any copy is made.
  if (lib == GemmLibrary::onednn && !onednn_runs(a, b, precision)) lib = GemmLibrary::openblas;
  if (lib == GemmLibrary::onednn) {
    if (!bf16) {
      if (gemm_onednn(a, b, c, nullptr, nullptr)) return;
    } else {
      Scratch sb(static_cast<size_t>(b.extent) * 2);
      to_bf16(b, sb);
      if (bf16_copies_a_row_major(a, b)) {
        const MatView rows = row_major(a);
        Scratch sa(static_cast<size_t>(rows.extent) * 2);
        to_bf16_rows(a, sa);
        if (gemm_onednn(rows, b, c, sa.as<uint16_t>(), sb.as<uint16_t>())) return;
      } else {
        Scratch sa(static_cast<size_t>(a.extent) * 2);
        to_bf16(a, sa);
        if (gemm_onednn(a, b, c, sa.as<uint16_t>(), sb.as<uint16_t>())) return;
      }
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
