#pragma once
// Internal to dot_general: an operand seen as B matrices of rows x K, which is what BLAS and
// oneDNN take, and the GEMM entry points behind it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace keel::cpu::detail {

// Element (b, row, k) sits at data + off[b] + (k_inner ? row * ld + k : k * ld + row).
struct MatView {
  const float* data = nullptr;
  std::vector<int64_t> off;  // one offset per batch entry, in output batch order
  int64_t rows = 1, k = 1;
  bool k_inner = true;
  int64_t ld = 1;
  int64_t extent = 0;  // elements of the buffer `data` points into (all that a view may read)
};

// Fixed tiles of each batch entry's output, a function of the shape alone, so a product cut into
// them and computed tile by tile (each single-threaded) has the same bytes at any thread count:
// tiles of up to 128 rows (columns when M = 1), and column panels at least 128 wide when that
// gives fewer than 12 tiles, so 2 or 3 threads share them evenly.
struct Tiling {
  int64_t M = 0, N = 0, rows = 1, cols = 1;
  int64_t row_tiles() const { return (M + rows - 1) / rows; }
  int64_t col_tiles() const { return (N + cols - 1) / cols; }
  int64_t per_batch() const { return row_tiles() * col_tiles(); }
};
Tiling tiling(int64_t batches, int64_t M, int64_t N);

// Runs unit(u) for every u in [0, units) over the OpenMP team, each unit on one thread.
void for_each_tile(int64_t units, const std::function<void(int64_t)>& unit);

// The library a product runs on; `automatic` picks per shape class (kernel_matmul.cpp).
enum class GemmLibrary { automatic, openblas, onednn };
const char* library_name(GemmLibrary lib);

// c[b] (M x N, row-major, contiguous) = a[b] (M x K) times b[b] (N x K) transposed, for every
// batch entry. K >= 1. `precision` is KEEL_MATMUL_F32 or KEEL_MATMUL_BF16 (abi.h): bf16 rounds
// both operands to bf16 (nearest even) and accumulates in f32; c stays f32.
void gemm(const MatView& a, const MatView& b, float* c, int32_t precision,
          GemmLibrary lib = GemmLibrary::automatic);

// gemm of bf16 operands: a16 and b16 hold a's and b's elements (their views' geometry; data is
// not read). oneDNN where it has a bf16 product, else OpenBLAS on the operands widened to f32
// (exact), so the result is gemm's with precision bf16 on the f32 values of a16 and b16.
void gemm_bf16(const MatView& a, const uint16_t* a16, const MatView& b, const uint16_t* b16,
               float* c);
// Bytes gemm_bf16 allocates (a row-major copy of a K-major a16, or the widened operands).
int64_t gemm_bf16_scratch_bytes(const MatView& a, const MatView& b);

// dst[i] = the bf16 bits of src[i], rounded to nearest even, NaN quiet (kernel_bf16_round.cpp).
// With AVX512-BF16 (and allow_native) its conversion instruction does it: the same bits.
void bf16_round_bits(const float* src, int64_t n, uint16_t* dst, bool allow_native = true);
bool bf16_round_is_native();

// Whether a bf16 gemm rounds a K-major A into a row-major copy: where its tiles run on AMX,
// whose brgemm takes only dense operands (a row tile of a K-major A is strided).
bool bf16_copies_a_row_major(const MatView& a, const MatView& b);

// Bytes gemm allocates beyond the operands (bf16 copies of both operands).
int64_t gemm_scratch_bytes(const MatView& a, const MatView& b, int32_t precision);

// Tests: makes `automatic` mean `lib` in this process (automatic again: the measured choice), so
// every dot_general form runs on each library.
void force_gemm_library(GemmLibrary lib);

// The library `automatic` picks for this product (or the forced one): oneDNN where it has a
// real product (brgemm, or gemm:jit run in fixed tiles), else OpenBLAS's tiles.
GemmLibrary choose_library(const MatView& a, const MatView& b, int32_t precision);

// OpenBLAS: cblas_sgemm (or cblas_sgemv when M or N is 1), f32 only. fixed_tiles (what gemm
// uses): fixed tiles of rows, each single-threaded, so the bytes do not depend on the thread
// count; false: one call per batch entry, threaded by OpenBLAS (for gemm_bench's comparison).
void gemm_blas_f32(const MatView& a, const MatView& b, float* c, bool fixed_tiles = true);

// oneDNN matmul: one (batched when the batch offsets are evenly spaced) primitive per panel of
// columns (onednn_panel_columns), cached by shape, strides, precision and thread count. Where
// its kernel would split K over the team (gemm:jit: AVX2 hosts, and K-major panels elsewhere;
// AMX's bf16 brgemm) and fixed_tiles, it runs the Tiling's tiles instead, each a one-thread
// primitive; false: threaded by oneDNN. `a16`
// / `b16` are the bf16 copies (same layout and offsets as a / b) for precision bf16, else null.
// Returns false, computing nothing, when oneDNN has only its reference implementation for this
// layout, or none (bf16 without AVX-512); the caller falls back.
bool gemm_onednn(const MatView& a, const MatView& b, float* c, const uint16_t* a16,
                 const uint16_t* b16, bool fixed_tiles = true);

// Bytes gemm_onednn allocates for b packed once for its AMX row tiles (0 where it does not).
int64_t onednn_packed_weights_bytes(const MatView& a, const MatView& b, bool bf16);

// Columns of c per oneDNN call: oneDNN 2.6 picks a blocking that runs at about half speed past
// 2048 columns (fc 1024x3072x768: 177 against 302 GFLOP/s in gemm_bench), so wider products run
// as equal panels of at most 1024 columns, strided views of b and c.
int64_t onednn_panel_columns(int64_t n);

// oneDNN's version and the ISA its kernels use, e.g. "oneDNN 2.6.3 (isa avx512_core_bf16)", and
// whether that ISA has native bf16 dot products (avx512_core_bf16 or AMX).
std::string onednn_description();
bool onednn_native_bf16();
// Whether oneDNN has its brgemm matmul on this CPU (AVX-512 and up; on AVX2 only gemm:jit).
bool onednn_has_brgemm();
// The implementation oneDNN picks for this product ("brg:avx512_core", "ref:any", ...), or
// "none: <why>" when it has none.
std::string onednn_impl(const MatView& a, const MatView& b, bool bf16);
// The implementation of the first one-thread tile where gemm_onednn runs the product in tiles.
std::string onednn_tile_impl(const MatView& a, const MatView& b, bool bf16);
// How many row tiles that tiling has.
int64_t onednn_row_tiles(const MatView& a, const MatView& b, bool bf16);
// Drops every cached primitive (tests: the next call builds afresh, whatever team it runs in).
void onednn_forget_primitives();

}  // namespace keel::cpu::detail
