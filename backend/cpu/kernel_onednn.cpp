// dot_general's products on oneDNN matmul. Creating a primitive costs far more than a small
// product, so each is built once per (shape, strides, precision, thread count) and kept, as
// PyTorch does; operand transposes are strides, never copies. The thread count is in the key
// because a primitive partitions its work for the team it was created for.
#include <omp.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

using dt = dnnl::memory::data_type;
using Dims = dnnl::memory::dims;

dnnl::engine& engine() {
  static auto* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed: a queued
  return *e;                                                      // run may use it at exit
}

// One stream per calling thread: oneDNN streams are not meant to be shared across threads.
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Batch, M, N, K, a's row / k / batch strides, b's, bf16, threads, c's row stride, and whether
// b comes packed in the layout the primitive asks for (format any) rather than at its strides.
using Key = std::array<int64_t, 14>;

struct Prim {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  // oneDNN's slow loop implementation, or none at all (bf16 on a CPU without AVX-512: 2.6 has
  // not even its reference loop there): callers use another library.
  bool reference = false;
  std::string impl;  // "brg:avx512_core", "ref:any", or "none: <why>"
};

// The batch stride when every entry is `stride` after the previous one (or there is one entry).
std::optional<int64_t> even_stride(const std::vector<int64_t>& off) {
  if (off.size() < 2) return int64_t{0};
  const int64_t s = off[1] - off[0];
  for (size_t i = 1; i < off.size(); ++i) {
    if (off[i] - off[i - 1] != s) return std::nullopt;
  }
  return s;
}

// Strides of (row, k) for a view: rows are M for a, N for b.
std::array<int64_t, 2> strides(const MatView& v) {
  if (v.k_inner) return {v.ld, 1};
  return {1, v.ld};
}

Key key_of(const MatView& a, const MatView& b, int64_t n, int64_t batch, int64_t sa, int64_t sb,
           bool bf16) {
  const auto [ar, ak] = strides(a);
  const auto [br, bk] = strides(b);
  return {batch,  a.rows, n, a.k, ar, ak, sa, br, bk, sb, bf16 ? 1 : 0, omp_get_max_threads(),
          b.rows, 0};
}

std::shared_ptr<const Prim> build(const Key& k) {
  const int64_t B = k[0], M = k[1], N = k[2], K = k[3];
  const dt in = k[10] ? dt::bf16 : dt::f32;
  dnnl::memory::desc src, wei, dst;
  if (B == 1) {
    src = {Dims{M, K}, in, Dims{k[4], k[5]}};
    wei = k[13] ? dnnl::memory::desc(Dims{K, N}, in, dnnl::memory::format_tag::any)
                : dnnl::memory::desc(Dims{K, N}, in, Dims{k[8], k[7]});
    dst = {Dims{M, N}, dt::f32, Dims{k[12], 1}};
  } else {
    src = {Dims{B, M, K}, in, Dims{k[6], k[4], k[5]}};
    wei = {Dims{B, K, N}, in, Dims{k[9], k[8], k[7]}};
    dst = {Dims{B, M, N}, dt::f32, Dims{M * k[12], k[12], 1}};
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // concurrent calls never share one
  auto p = std::make_shared<Prim>();
  // oneDNN partitions a primitive's work (a sum over K included) for the threads it sees at
  // creation: build it for the count its key names, whatever team is calling.
  const int callers = omp_get_max_threads();
  omp_set_num_threads(static_cast<int>(k[11]));
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{callers};
  try {
    p->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr, engine());
  } catch (const dnnl::error& e) {
    p->reference = true;
    p->impl = fmt::format("none: oneDNN has no {} matmul for {}x{}x{}x{} ({})",
                          k[10] ? "bf16" : "f32", B, M, N, K, e.what());
    return p;
  }
  p->prim = dnnl::matmul(p->pd);
  p->impl = p->pd.impl_info_str();
  p->reference = p->impl.rfind("ref", 0) == 0;
  return p;
}

struct PrimitiveCache {
  std::mutex mu;
  std::map<Key, std::shared_ptr<const Prim>> map;
};
PrimitiveCache& primitive_cache() {
  static auto* cache = new PrimitiveCache;  // never destroyed, as engine()
  return *cache;
}

std::shared_ptr<const Prim> primitive(const Key& k) {
  PrimitiveCache& cache = primitive_cache();
  {
    std::lock_guard lock(cache.mu);
    auto it = cache.map.find(k);
    if (it != cache.map.end()) return it->second;
  }
  std::shared_ptr<const Prim> p = build(k);  // outside the lock: creation takes milliseconds
  std::lock_guard lock(cache.mu);
  return cache.map.emplace(k, std::move(p)).first->second;
}

// One product of `batch` entries starting at a_base / b_base / c.
void run(const Prim& p, const void* a_base, const void* b_base, float* c) {
  dnnl::engine& e = engine();
  Scratch scratch(p.pd.scratchpad_desc().get_size());
  dnnl::memory sa(p.pd.src_desc(), e, const_cast<void*>(a_base));
  dnnl::memory sb(p.pd.weights_desc(), e, const_cast<void*>(b_base));
  dnnl::memory sc(p.pd.dst_desc(), e, c);
  dnnl::memory sp(p.pd.scratchpad_desc(), e, scratch.as<void>());
  dnnl::stream& s = stream();
  p.prim.execute(
      s,
      {{DNNL_ARG_SRC, sa}, {DNNL_ARG_WEIGHTS, sb}, {DNNL_ARG_DST, sc}, {DNNL_ARG_SCRATCHPAD, sp}});
  s.wait();
}

// Whether a threaded primitive gives every thread whole outputs, so its bytes do not depend on
// the thread count: brgemm's AVX-512 kernels do; its AMX kernels split long sums over the team.
bool splits_by_output(const std::string& impl) {
  return impl.rfind("brg", 0) == 0 && impl.find("amx") == std::string::npos;
}

// A one-thread primitive of m x n outputs for a tile of this product.
std::shared_ptr<const Prim> tile_primitive(const MatView& a, const MatView& b, bool bf16, int64_t m,
                                           int64_t n) {
  Key k = key_of(a, b, n, 1, 0, 0, bf16);
  k[1] = m;
  k[11] = 1;  // threads
  return primitive(k);
}

// The product's fixed tiling for one-thread oneDNN tiles. AMX's brgemm takes only dense weights
// and output: a column panel's strides send oneDNN 2.6 to its slower gemm:jit (one 128x768x1024
// tile on one core: 495 against 557 GFLOP/s), so on AMX the tiles span every column. Each such
// tile repacks all of b, so a product of three row tiles is cut in two taller ones: gpt2-s's
// weight gradients (M = 384, K = 2048) ran 908-1112 GFLOP/s on two tiles of 192 rows against
// 620-776 on three of 128 (two cores; on three, one core idles: by those rates about what the
// taller tiles gain, not measured). The tiling depends on the shape only, not on the team.
Tiling onednn_tiling(const MatView& a, const MatView& b, bool bf16) {
  const int64_t M = a.rows, N = b.rows;
  Tiling t = tiling(static_cast<int64_t>(a.off.size()), M, N);
  const bool whole_rows =
      M > 1 && tile_primitive(a, b, bf16, t.rows, N)->impl.find("amx") != std::string::npos;
  t.cols = whole_rows ? N : std::min(t.cols, onednn_panel_columns(N));
  if (whole_rows && a.off.size() == 1 && t.row_tiles() == 3) {
    const int64_t half = (M + 1) / 2;
    t.rows = (half + 15) / 16 * 16;  // whole AMX tiles of 16 rows
    if (tile_primitive(a, b, bf16, t.rows, N)->impl.find("amx") == std::string::npos) {
      t.rows = tiling(1, M, N).rows;  // the taller tile left AMX: keep the three
    }
  }
  return t;
}

// Row tiles that span every column (AMX) of one product: each tile's primitive repacks the
// b it reads into AMX's pairs of rows itself, so where at least kPackedTiles tiles read b it is
// packed once into the layout they ask for (when the full and the last row tile ask for the
// same one) and every tile reads that. With fewer, packing all of b up front lost (gpt2-s's
// weight gradients, 3 tiles over a b of K = 2048 tokens: 343-422 against 451-516 GFLOP/s).
constexpr int64_t kPackedTiles = 8;
struct PackedWeights {
  std::shared_ptr<const Prim> full, tail;
  dnnl::memory::desc desc;
};
std::optional<PackedWeights> packed_weights(const MatView& a, const MatView& b, bool bf16,
                                            const Tiling& t) {
  if (!bf16 || a.off.size() != 1 || t.col_tiles() != 1 || t.row_tiles() < kPackedTiles)
    return std::nullopt;
  auto prim = [&](int64_t m) {
    Key k = key_of(a, b, b.rows, 1, 0, 0, true);
    k[1] = m;
    k[11] = 1;
    k[13] = 1;
    return primitive(k);
  };
  PackedWeights w{prim(t.rows), prim(t.M - (t.row_tiles() - 1) * t.rows), {}};
  if (w.full->reference || w.tail->reference) return std::nullopt;
  if (w.full->impl.find("amx") == std::string::npos) return std::nullopt;
  w.desc = w.full->pd.weights_desc();
  if (w.tail->pd.weights_desc() != w.desc) return std::nullopt;
  return w;
}

// b (at its strides) reordered into `w`'s layout, by oneDNN's reorder over the team (a copy:
// the same bytes at any thread count).
void pack(const MatView& b, const void* b16, const PackedWeights& w, void* into) {
  const Dims strides = {b.k_inner ? 1 : b.ld, b.k_inner ? b.ld : 1};
  const dnnl::memory::desc plain(Dims{b.k, b.rows}, dt::bf16, strides);
  dnnl::memory src(plain, engine(), const_cast<void*>(b16));
  dnnl::memory dst(w.desc, engine(), into);
  dnnl::stream& s = stream();
  dnnl::reorder(src, dst).execute(s, src, dst);
  s.wait();
}

// The Tiling's tiles, each a one-thread primitive of batch 1 (oneDNN runs single-threaded
// inside the team's parallel region), so no sum over K is split between threads.
template <class At>
bool gemm_onednn_tiles(const MatView& a, const MatView& b, float* c, bool bf16, const At& at) {
  const int64_t M = a.rows, N = b.rows;
  const Tiling t = onednn_tiling(a, b, bf16);
  if (const std::optional<PackedWeights> w = packed_weights(a, b, bf16, t)) {
    Scratch packed(w->desc.get_size());
    pack(b, at(b, 0, 0), *w, packed.as<void>());
    for_each_tile(t.row_tiles(), [&](int64_t ri) {
      run(ri + 1 == t.row_tiles() ? *w->tail : *w->full, at(a, 0, ri * t.rows), packed.as<void>(),
          c + ri * t.rows * N);
    });
    return true;
  }
  auto prim = [&](int64_t m, int64_t n) { return tile_primitive(a, b, bf16, m, n); };
  const int64_t m_tail = M - (t.row_tiles() - 1) * t.rows,
                n_tail = N - (t.col_tiles() - 1) * t.cols;
  const std::array<std::shared_ptr<const Prim>, 4> p = {prim(t.rows, t.cols), prim(t.rows, n_tail),
                                                        prim(m_tail, t.cols), prim(m_tail, n_tail)};
  for (const auto& q : p) {
    if (q->reference) return false;  // before writing any of c
  }
  for_each_tile(static_cast<int64_t>(a.off.size()) * t.per_batch(), [&](int64_t u) {
    const int64_t i = u / t.per_batch(), ri = u % t.per_batch() / t.col_tiles(),
                  ci = u % t.col_tiles();
    const bool last_row = ri + 1 == t.row_tiles(), last_col = ci + 1 == t.col_tiles();
    run(*p[(last_row ? 2 : 0) + (last_col ? 1 : 0)], at(a, i, ri * t.rows), at(b, i, ci * t.cols),
        c + i * M * N + ri * t.rows * N + ci * t.cols);
  });
  return true;
}

}  // namespace

int64_t onednn_packed_weights_bytes(const MatView& a, const MatView& b, bool bf16) {
  if (!splits_by_output(onednn_impl(a, b, bf16))) {
    const std::optional<PackedWeights> w = packed_weights(a, b, bf16, onednn_tiling(a, b, bf16));
    if (w) return static_cast<int64_t>(w->desc.get_size()) + 64;
  }
  return 0;
}

int64_t onednn_panel_columns(int64_t n) {
  constexpr int64_t kWidest = 2048, kPanel = 1024;
  if (n <= kWidest) return n;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  return (n + panels - 1) / panels;
}

bool gemm_onednn(const MatView& a, const MatView& b, float* c, const uint16_t* a16,
                 const uint16_t* b16, bool fixed_tiles) {
  const bool bf16 = a16 != nullptr;
  const int64_t batches = static_cast<int64_t>(a.off.size()), N = b.rows;
  const std::optional<int64_t> sa = even_stride(a.off), sb = even_stride(b.off);
  auto at = [&](const MatView& v, const uint16_t* v16, int64_t i, int64_t row) {
    const int64_t off = v.off[static_cast<size_t>(i)] + (v.k_inner ? row * v.ld : row);
    return bf16 ? static_cast<const void*>(v16 + off) : static_cast<const void*>(v.data + off);
  };
  if (N == 0) return true;  // nothing to write
  if (fixed_tiles && !splits_by_output(onednn_impl(a, b, bf16))) {
    return gemm_onednn_tiles(a, b, c, bf16, [&](const MatView& v, int64_t i, int64_t row) {
      return at(v, &v == &a ? a16 : b16, i, row);
    });
  }
  const int64_t w = onednn_panel_columns(N), last = N - (N - 1) / w * w;
  const bool batched = sa && sb;  // then one batched primitive per panel
  auto primitive_for = [&](int64_t n) {
    return batched ? primitive(key_of(a, b, n, batches, *sa, *sb, bf16))
                   : primitive(key_of(a, b, n, 1, 0, 0, bf16));
  };
  const auto full = primitive_for(w), tail = primitive_for(last);
  if (full->reference || tail->reference) return false;  // before writing any of c
  for (int64_t n0 = 0; n0 < N; n0 += w) {
    const Prim& p = n0 + w < N ? *full : *tail;
    if (batched) {
      run(p, at(a, a16, 0, 0), at(b, b16, 0, n0), c + n0);
      continue;
    }
    for (int64_t i = 0; i < batches; ++i)
      run(p, at(a, a16, i, 0), at(b, b16, i, n0), c + i * a.rows * N + n0);
  }
  return true;
}

void onednn_forget_primitives() {
  PrimitiveCache& cache = primitive_cache();
  std::lock_guard lock(cache.mu);
  cache.map.clear();
}

int64_t onednn_row_tiles(const MatView& a, const MatView& b, bool bf16) {
  return onednn_tiling(a, b, bf16).row_tiles();
}

std::string onednn_tile_impl(const MatView& a, const MatView& b, bool bf16) {
  const Tiling t = onednn_tiling(a, b, bf16);
  return tile_primitive(a, b, bf16, t.rows, t.cols)->impl;
}

std::string onednn_impl(const MatView& a, const MatView& b, bool bf16) {
  const std::optional<int64_t> sa = even_stride(a.off), sb = even_stride(b.off);
  const bool batched = sa && sb;
  auto p = primitive(key_of(a, b, onednn_panel_columns(b.rows),
                            batched ? static_cast<int64_t>(a.off.size()) : 1, batched ? *sa : 0,
                            batched ? *sb : 0, bf16));
  return p->impl;
}

namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::all:
      return "all";
  }
  return "unknown";
}

}  // namespace

std::string onednn_description() {
  const dnnl_version_t* v = dnnl::version();
  return fmt::format("oneDNN {}.{}.{} (isa {})", v->major, v->minor, v->patch,
                     isa_name(dnnl::get_effective_cpu_isa()));
}

bool onednn_has_brgemm() {
  static const bool has = [] {
    const Key dense = {1, 64, 64, 64, 64, 1, 0, 64, 1, 0, 0, 1, 64, 0};  // 64^3, f32, one thread
    return primitive(dense)->impl.rfind("brg", 0) == 0;
  }();
  return has;
}

bool onednn_native_bf16() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

}  // namespace keel::cpu::detail
