// dot_general (XLA DotGeneral): out dims = batch, lhs free, rhs free. f32 goes to the GEMM
// libraries (kernel_matmul.cpp) directly when each operand's free dims and contracting dims each
// collapse to one strided index (batch dims may sit anywhere); an operand that does not is first
// permuted into a temporary. The precision argument applies to f32 operands; bf16 operands with
// an f32 result (preferred_element_type) take the same layouts straight to a bf16 GEMM; with a
// bf16 result they convert to f32 around the f32 path; integers use plain loops wrapping in 64
// bits.
#include <algorithm>
#include <numeric>
#include <optional>

#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_strided.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

using Axes = std::vector<int64_t>;

// One operand: its shape, its strides (null: row-major) and its batch, free (ascending) and
// contracting dims.
struct Side {
  const int64_t* shape;
  int rank;
  Axes batch, free, contract;
  const int64_t* stride = nullptr;
};

void strides_of(const Side& s, int64_t* out) {
  if (s.stride) {
    std::copy(s.stride, s.stride + s.rank, out);
  } else {
    row_major_strides(s.shape, s.rank, out);
  }
}

int64_t prod(const Side& s, const Axes& axes) {
  int64_t n = 1;
  for (int64_t d : axes) n *= s.shape[d];
  return n;
}

size_t elements(const Side& s) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.shape[d];
  return static_cast<size_t>(n);
}

// The dims `axes` (in this order) as a single index, ignoring size-1 dims: possible when each
// dim's stride is the next one's stride times its size.
struct Group {
  int64_t size = 1, stride = 0;
  bool ok = true;
};
Group collapse(const Side& s, const int64_t* strides, const Axes& axes) {
  Group g;
  int64_t last = -1;
  for (int64_t d : axes) {
    if (s.shape[d] == 1) continue;
    if (last >= 0 && strides[last] != strides[d] * s.shape[d]) g.ok = false;
    g.size *= s.shape[d];
    g.stride = strides[d];
    last = d;
  }
  return g;
}

std::optional<MatView> as_matrix(const float* data, const Side& s) {
  int64_t strides[KEEL_MAX_RANK];
  strides_of(s, strides);
  const Group f = collapse(s, strides, s.free), k = collapse(s, strides, s.contract);
  if (!f.ok || !k.ok) return std::nullopt;
  MatView m;
  m.data = data;
  m.extent = static_cast<int64_t>(elements(s));
  m.rows = f.size;
  m.k = k.size;
  if (k.size <= 1 || k.stride == 1) {
    m.ld = f.size <= 1 ? std::max<int64_t>(k.size, 1) : f.stride;
    if (m.ld < m.k) return std::nullopt;
  } else if (f.size <= 1 || f.stride == 1) {
    m.k_inner = false;
    m.ld = k.stride;
    if (m.ld < m.rows) return std::nullopt;
  } else {
    return std::nullopt;
  }
  // Batch entries in output order: the batch dims' multi-index, first dim slowest.
  m.off.assign(static_cast<size_t>(prod(s, s.batch)), 0);
  int64_t span = 1;
  for (size_t i = s.batch.size(); i-- > 0;) {
    const int64_t n = s.shape[s.batch[i]], st = strides[s.batch[i]];
    for (size_t b = 0; b < m.off.size(); ++b) m.off[b] += (static_cast<int64_t>(b) / span) % n * st;
    span *= n;
  }
  return m;
}

// The order an operand is permuted into: [batch, free, contract] (or [batch, contract, free]
// when its innermost dim is contracting, so the copy moves whole rows), and the view of the
// result (data null until the copy exists).
struct Permuted {
  Axes perm;
  MatView view;
};
Permuted permuted_layout(const Side& s) {
  int inner = s.rank - 1;
  while (inner > 0 && s.shape[inner] == 1) --inner;
  const bool k_last = std::find(s.contract.begin(), s.contract.end(), inner) != s.contract.end();
  Axes perm = s.batch;
  const Axes& mid = k_last ? s.free : s.contract;
  const Axes& last = k_last ? s.contract : s.free;
  perm.insert(perm.end(), mid.begin(), mid.end());
  perm.insert(perm.end(), last.begin(), last.end());
  Side p{nullptr, s.rank, {}, {}, {}};
  int64_t shape[KEEL_MAX_RANK];
  for (int d = 0; d < s.rank; ++d) shape[d] = s.shape[perm[d]];
  p.shape = shape;
  const int64_t nb = static_cast<int64_t>(s.batch.size());
  const int64_t nmid = static_cast<int64_t>(mid.size());
  for (int64_t d = 0; d < s.rank; ++d) {
    (d < nb          ? p.batch
     : d < nb + nmid ? (k_last ? p.free : p.contract)
                     : (k_last ? p.contract : p.free))
        .push_back(d);
  }
  std::optional<MatView> m = as_matrix(nullptr, p);
  if (!m) fail("dot_general: internal error: a permuted operand is not a matrix");
  return {std::move(perm), std::move(*m)};
}

// The operand (elements of `size` bytes) copied into `tmp` in permuted_layout's order.
MatView permuted(const void* data, size_t size, const Side& s, Scratch& tmp) {
  Permuted p = permuted_layout(s);
  StridedCopy c;  // from the operand's own strides: it may be a folded view
  c.rank = s.rank;
  int64_t in_strides[KEEL_MAX_RANK];
  strides_of(s, in_strides);
  for (int d = 0; d < s.rank; ++d) {
    c.shape[d] = s.shape[p.perm[d]];
    c.src_stride[d] = in_strides[p.perm[d]];
  }
  row_major_strides(c.shape, s.rank, c.dst_stride);
  strided_copy(tmp.as<char>(), data, size, c);
  p.view.data = size == sizeof(float) ? tmp.as<float>() : nullptr;
  return std::move(p.view);
}

// Contracting pairs reordered so the lhs (or rhs) dims ascend; any order used by both is valid.
void order_pairs(Side& l, Side& r, bool by_lhs) {
  std::vector<size_t> idx(l.contract.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  const Axes lc = l.contract, rc = r.contract;
  std::sort(idx.begin(), idx.end(),
            [&](size_t a, size_t b) { return by_lhs ? lc[a] < lc[b] : rc[a] < rc[b]; });
  for (size_t i = 0; i < idx.size(); ++i) {
    l.contract[i] = lc[idx[i]];
    r.contract[i] = rc[idx[i]];
  }
}

// The layout dot_f32 uses: each operand as a matrix view when it is one, else (nullopt) to be
// permuted into a temporary. It depends on shapes only, so the scratch can be known in advance.
struct F32Plan {
  Side l, r;
  std::optional<MatView> a, b;
  // Permuted copies, then what the GEMM adds for `precision` (layouts as gemm will see them).
  int64_t scratch_bytes(int32_t precision) const {
    const int64_t copies =
        static_cast<int64_t>(((a ? 0 : elements(l)) + (b ? 0 : elements(r))) * sizeof(float));
    if (precision == KEEL_MATMUL_F32) return copies;
    const MatView va = a ? *a : permuted_layout(l).view, vb = b ? *b : permuted_layout(r).view;
    return copies + gemm_scratch_bytes(va, vb, precision);
  }
};

F32Plan plan_f32(const float* lhs, const float* rhs, Side l, Side r) {
  order_pairs(l, r, true);
  std::optional<MatView> a = as_matrix(lhs, l), b = as_matrix(rhs, r);
  if (!a || !b) {
    Side l2 = l, r2 = r;
    order_pairs(l2, r2, false);
    std::optional<MatView> a2 = as_matrix(lhs, l2), b2 = as_matrix(rhs, r2);
    if ((a2 && b2) || (!a && !b && (a2 || b2))) {
      return {std::move(l2), std::move(r2), std::move(a2), std::move(b2)};
    }
  }
  return {std::move(l), std::move(r), std::move(a), std::move(b)};
}

void dot_f32(const float* lhs, const float* rhs, float* out, const Side& l, const Side& r,
             int32_t precision) {
  F32Plan p = plan_f32(lhs, rhs, l, r);
  std::optional<Scratch> ta, tb;
  if (!p.a) p.a = permuted(lhs, sizeof(float), p.l, ta.emplace(elements(p.l) * sizeof(float)));
  if (!p.b) p.b = permuted(rhs, sizeof(float), p.r, tb.emplace(elements(p.r) * sizeof(float)));
  gemm(*p.a, *p.b, out, precision);
}

// bf16 operands, f32 result (preferred_element_type f32): the f32 path's layouts over the
// 16-bit elements, multiplied by gemm_bf16 with no rounding left to do.
void dot_bf16_to_f32(const uint16_t* lhs, const uint16_t* rhs, float* out, const Side& l,
                     const Side& r) {
  F32Plan p = plan_f32(nullptr, nullptr, l, r);
  std::optional<Scratch> ta, tb;
  const uint16_t *a16 = lhs, *b16 = rhs;
  if (!p.a) {
    p.a = permuted(lhs, 2, p.l, ta.emplace(elements(p.l) * 2));
    a16 = ta->as<uint16_t>();
  }
  if (!p.b) {
    p.b = permuted(rhs, 2, p.r, tb.emplace(elements(p.r) * 2));
    b16 = tb->as<uint16_t>();
  }
  gemm_bf16(*p.a, a16, *p.b, b16, out);
}

// An operand whose dims in the order batch, a2, a3 are already 0, 1, 2...: no permutation.
bool identity_order(const Side& s, const Axes& a2, const Axes& a3) {
  Axes perm = s.batch;
  perm.insert(perm.end(), a2.begin(), a2.end());
  perm.insert(perm.end(), a3.begin(), a3.end());
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Integers: both operands permuted to [batch, M, K] and [batch, K, N] (unless already so), then
// each output row accumulates rhs rows scaled by lhs entries, wrapping in uint64.
template <class T>
void dot_int(const T* lhs, const T* rhs, T* out, const Side& l, const Side& r, int64_t M, int64_t N,
             int64_t K, int64_t B) {
  auto canonical = [](const T* data, const Side& s, const Axes& a2, const Axes& a3,
                      std::optional<Scratch>& tmp) {
    if (identity_order(s, a2, a3)) return data;
    Axes perm = s.batch;
    perm.insert(perm.end(), a2.begin(), a2.end());
    perm.insert(perm.end(), a3.begin(), a3.end());
    tmp.emplace(elements(s) * sizeof(T));
    permute(tmp->as<T>(), data, sizeof(T), s.shape, s.rank, perm.data());
    return static_cast<const T*>(tmp->as<T>());
  };
  std::optional<Scratch> ta, tb;
  const T* A = canonical(lhs, l, l.free, l.contract, ta);
  const T* Bm = canonical(rhs, r, r.contract, r.free, tb);
  parallel_for(B * M, B * M * N * K, [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> acc(static_cast<size_t>(N));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / M;
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t k = 0; k < K; ++k) {
        const auto a = static_cast<uint64_t>(A[row * K + k]);
        const T* brow = Bm + (b * K + k) * N;
        for (int64_t n = 0; n < N; ++n) acc[n] += a * static_cast<uint64_t>(brow[n]);
      }
      for (int64_t n = 0; n < N; ++n) out[row * N + n] = static_cast<T>(acc[n]);
    }
  });
}

void check_axes(const Axes& axes, int rank, const char* what) {
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : axes) {
    if (d < 0 || d >= rank || seen[d])
      fail("dot_general: {} dims are invalid for rank {}", what, rank);
    seen[d] = true;
  }
}

Side make_side(const keel_view& v, const int64_t* batch, const int64_t* contract, int32_t nb,
               int32_t nc, const char* what, bool keep_strides = true) {
  Side s{v.shape,
         v.rank,
         Axes(batch, batch + nb),
         {},
         Axes(contract, contract + nc),
         v.strided && keep_strides ? v.stride : nullptr};
  Axes used = s.batch;
  used.insert(used.end(), s.contract.begin(), s.contract.end());
  check_axes(used, v.rank, what);
  for (int64_t d = 0; d < v.rank; ++d) {
    if (std::find(used.begin(), used.end(), d) == used.end()) s.free.push_back(d);
  }
  return s;
}

int64_t strided_copy_bytes(const keel_view& lhs, const keel_view& rhs) {
  return (lhs.strided ? numel(lhs) * static_cast<int64_t>(elem_size(lhs)) : 0) +
         (rhs.strided ? numel(rhs) * static_cast<int64_t>(elem_size(rhs)) : 0);
}

// bf16: both operands widened to f32 (exact), the f32 path, then one rounding per output.
void dot_bf16(const keel_view& lhs, const keel_view& rhs, keel_view& out, const Side& l,
              const Side& r) {
  auto widen_all = [](const keel_view& v, Scratch& to) {
    const int64_t n = numel(v);
    const auto* src = static_cast<const bf16_t*>(v.data);
    parallel_for(n, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) to.as<float>()[i] = bf16_load(src[i]);
    });
  };
  const int64_t no = numel(out);
  Scratch fl(static_cast<size_t>(numel(lhs)) * 4), fr(static_cast<size_t>(numel(rhs)) * 4);
  Scratch fo(static_cast<size_t>(no) * 4);
  widen_all(lhs, fl);
  widen_all(rhs, fr);
  dot_f32(fl.as<float>(), fr.as<float>(), fo.as<float>(), l, r, KEEL_MATMUL_F32);
  auto* dst = static_cast<bf16_t*>(out.data);
  parallel_for(no, no, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = bf16_store(fo.as<float>()[i]);
  });
}

void check_shapes(const Side& l, const Side& r, const keel_view& lhs, const keel_view& rhs,
                  const keel_view& out) {
  std::vector<int64_t> want;
  bool ok = true;
  for (size_t i = 0; i < l.batch.size(); ++i) {
    ok = ok && l.shape[l.batch[i]] == r.shape[r.batch[i]];
    want.push_back(l.shape[l.batch[i]]);
  }
  for (size_t i = 0; i < l.contract.size(); ++i) {
    ok = ok && l.shape[l.contract[i]] == r.shape[r.contract[i]];
  }
  for (int64_t d : l.free) want.push_back(l.shape[d]);
  for (int64_t d : r.free) want.push_back(r.shape[d]);
  if (!ok || want != dims(out)) {
    fail("dot_general: lhs {} and rhs {} with these dims do not give {}", view_str(lhs),
         view_str(rhs), view_str(out));
  }
}

// A strided operand copied row-major into `tmp` (the bf16 and integer paths read row-major).
keel_view contiguous(const keel_view& v, std::optional<Scratch>& tmp) {
  if (!v.strided) return v;
  StridedCopy c;
  c.rank = v.rank;
  for (int d = 0; d < v.rank; ++d) {
    c.shape[d] = v.shape[d];
    c.src_stride[d] = v.stride[d];
  }
  row_major_strides(c.shape, v.rank, c.dst_stride);
  tmp.emplace(static_cast<size_t>(numel(v)) * elem_size(v));
  strided_copy(tmp->as<char>(), v.data, elem_size(v), c);
  keel_view out = v;
  out.data = tmp->as<char>();
  out.strided = 0;
  return out;
}

}  // namespace

int64_t dot_general_scratch(const keel_view* lhs, const keel_view* rhs, const keel_view* out,
                            const int64_t* lhs_batch, const int64_t* rhs_batch, int32_t n_batch,
                            const int64_t* lhs_contract, const int64_t* rhs_contract,
                            int32_t n_contract, int32_t precision) {
  const Side l = make_side(*lhs, lhs_batch, lhs_contract, n_batch, n_contract, "lhs");
  const Side r = make_side(*rhs, rhs_batch, rhs_contract, n_batch, n_contract, "rhs");
  const int64_t no = numel(*out);
  if (lhs->dtype == static_cast<int32_t>(DType::bf16) &&
      out->dtype == static_cast<int32_t>(DType::f32)) {
    const F32Plan p = plan_f32(nullptr, nullptr, l, r);
    const MatView va = p.a ? *p.a : permuted_layout(p.l).view,
                  vb = p.b ? *p.b : permuted_layout(p.r).view;
    return static_cast<int64_t>((p.a ? 0 : elements(p.l)) + (p.b ? 0 : elements(p.r))) * 2 +
           gemm_bf16_scratch_bytes(va, vb);
  }
  switch (static_cast<DType>(out->dtype)) {
    case DType::f32:
      return plan_f32(nullptr, nullptr, l, r).scratch_bytes(precision);
    case DType::bf16: {  // strided operands copied, all widened to f32, then the f32 path
      const Side cl = make_side(*lhs, lhs_batch, lhs_contract, n_batch, n_contract, "lhs", false);
      const Side cr = make_side(*rhs, rhs_batch, rhs_contract, n_batch, n_contract, "rhs", false);
      return (numel(*lhs) + numel(*rhs) + no) * 4 + strided_copy_bytes(*lhs, *rhs) +
             plan_f32(nullptr, nullptr, cl, cr).scratch_bytes(KEEL_MATMUL_F32);
    }
    case DType::i32:
    case DType::i64: {
      const int64_t size = elem_size(*out);
      const int64_t N = prod(r, r.free);
      return strided_copy_bytes(*lhs, *rhs) +
             (identity_order(l, l.free, l.contract) ? 0
                                                    : static_cast<int64_t>(elements(l)) * size) +
             (identity_order(r, r.contract, r.free) ? 0
                                                    : static_cast<int64_t>(elements(r)) * size) +
             N * 8 * omp_get_num_procs();  // one row accumulator per thread, at most
    }
    case DType::boolean:
      break;
  }
  return 0;
}

void dot_general(const keel_view* lhs, const keel_view* rhs, keel_view* out,
                 const int64_t* lhs_batch, const int64_t* rhs_batch, int32_t n_batch,
                 const int64_t* lhs_contract, const int64_t* rhs_contract, int32_t n_contract,
                 int32_t precision) {
  check_view(*lhs, "dot_general", "lhs", /*strided_ok=*/true);
  check_view(*rhs, "dot_general", "rhs", /*strided_ok=*/true);
  check_view(*out, "dot_general", "output");
  check_same_dtype(*lhs, *rhs, "dot_general");
  const bool widening = lhs->dtype == static_cast<int32_t>(DType::bf16) &&
                        out->dtype == static_cast<int32_t>(DType::f32);
  if (!widening) check_same_dtype(*lhs, *out, "dot_general");
  if (lhs->dtype == static_cast<int32_t>(DType::boolean)) fail("dot_general: bool is not a number");
  if (n_batch < 0 || n_contract < 0) fail("dot_general: negative dim counts");
  if (precision != KEEL_MATMUL_F32 && precision != KEEL_MATMUL_BF16) {
    fail("dot_general: precision {} is not KEEL_MATMUL_F32 (0) or KEEL_MATMUL_BF16 (1)", precision);
  }
  // Only the f32 paths read strided operands in place; the others take row-major copies.
  std::optional<Scratch> tl, tr;
  const bool f32 = out->dtype == static_cast<int32_t>(DType::f32);
  const keel_view lv = f32 ? *lhs : contiguous(*lhs, tl);
  const keel_view rv = f32 ? *rhs : contiguous(*rhs, tr);
  lhs = &lv;
  rhs = &rv;
  const Side l = make_side(*lhs, lhs_batch, lhs_contract, n_batch, n_contract, "lhs");
  const Side r = make_side(*rhs, rhs_batch, rhs_contract, n_batch, n_contract, "rhs");
  check_shapes(l, r, *lhs, *rhs, *out);
  const int64_t B = prod(l, l.batch), M = prod(l, l.free), N = prod(r, r.free);
  const int64_t K = prod(l, l.contract);
  if (B * M * N == 0) return;
  if (K == 0) {  // an empty sum
    std::memset(out->data, 0, static_cast<size_t>(B * M * N) * elem_size(*out));
    return;
  }
  if (widening) {
    return dot_bf16_to_f32(static_cast<const uint16_t*>(lhs->data),
                           static_cast<const uint16_t*>(rhs->data), static_cast<float*>(out->data),
                           l, r);
  }
  switch (static_cast<DType>(out->dtype)) {
    case DType::f32:
      return dot_f32(static_cast<const float*>(lhs->data), static_cast<const float*>(rhs->data),
                     static_cast<float*>(out->data), l, r, precision);
    case DType::bf16:
      return dot_bf16(*lhs, *rhs, *out, l, r);
    case DType::i32:
      return dot_int(static_cast<const int32_t*>(lhs->data), static_cast<const int32_t*>(rhs->data),
                     static_cast<int32_t*>(out->data), l, r, M, N, K, B);
    case DType::i64:
      return dot_int(static_cast<const int64_t*>(lhs->data), static_cast<const int64_t*>(rhs->data),
                     static_cast<int64_t*>(out->data), l, r, M, N, K, B);
    case DType::boolean:
      break;
  }
}

}  // namespace keel::cpu::detail
