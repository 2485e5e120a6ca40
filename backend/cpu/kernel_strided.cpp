// Strided copies: drop size-1 dims, merge dims that stay adjacent, then copy whole rows (memcpy,
// fill for a broadcast row, or a strided loop), or 2-D tiles when the copy transposes the
// innermost dimension.
#include "backend/cpu/kernel_strided.h"

#include <algorithm>

#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

constexpr int64_t kTile = 32;  // a 32x32 tile of 8-byte elements is 8 KB: both sides stay in L1
constexpr int64_t kPiece = 1 << 14;  // elements per work item when a few long rows are split
constexpr int64_t kShortRow = 4096;  // rows shorter than this (bytes) are tiled when transposed

// Walks the outer dims of a copy in row-major order, tracking both offsets.
struct Odometer {
  int n = 0;
  const int64_t *shape = nullptr, *ds = nullptr, *ss = nullptr;
  int64_t idx[KEEL_MAX_RANK] = {};
  int64_t doff = 0, soff = 0;

  void seek(int64_t flat) {
    doff = soff = 0;
    for (int d = n; d-- > 0;) {
      idx[d] = flat % shape[d];
      flat /= shape[d];
      doff += idx[d] * ds[d];
      soff += idx[d] * ss[d];
    }
  }
  void next() {
    for (int d = n; d-- > 0;) {
      doff += ds[d];
      soff += ss[d];
      if (++idx[d] < shape[d]) return;
      doff -= ds[d] * shape[d];
      soff -= ss[d] * shape[d];
      idx[d] = 0;
    }
  }
};

StridedCopy simplify(const StridedCopy& c) {
  StridedCopy s;
  for (int d = 0; d < c.rank; ++d) {
    if (c.shape[d] == 1) continue;
    const int r = s.rank;
    if (r > 0 && s.dst_stride[r - 1] == c.dst_stride[d] * c.shape[d] &&
        s.src_stride[r - 1] == c.src_stride[d] * c.shape[d]) {
      s.shape[r - 1] *= c.shape[d];
      s.dst_stride[r - 1] = c.dst_stride[d];
      s.src_stride[r - 1] = c.src_stride[d];
      continue;
    }
    s.shape[r] = c.shape[d];
    s.dst_stride[r] = c.dst_stride[d];
    s.src_stride[r] = c.src_stride[d];
    s.rank = r + 1;
  }
  return s;
}

// Whole rows of the innermost dim; with few rows each row is cut into pieces so that every
// thread still gets work (a broadcast scalar or one long contiguous slice).
template <class T>
void copy_rows(T* dst, const T* src, const StridedCopy& c, int64_t total) {
  const int in = c.rank - 1;
  const int64_t len = c.shape[in], ds = c.dst_stride[in], ss = c.src_stride[in];
  const int64_t rows = total / len;
  const int64_t piece = rows < 16 ? std::min<int64_t>(len, kPiece) : len;
  const int64_t pieces = (len + piece - 1) / piece;
  parallel_for(rows * pieces, total, [&](int64_t begin, int64_t end) {
    Odometer od{in, c.shape, c.dst_stride, c.src_stride};
    od.seek(begin / pieces);
    for (int64_t item = begin, row = begin / pieces; item < end; ++item) {
      if (item / pieces != row) {
        od.next();
        ++row;
      }
      const int64_t i0 = item % pieces * piece, n = std::min(len, i0 + piece) - i0;
      T* d = dst + od.doff + i0 * ds;
      const T* s = src + od.soff + i0 * ss;
      if (ds == 1 && ss == 1) {
        std::memcpy(d, s, static_cast<size_t>(n) * sizeof(T));
      } else if (ds == 1 && ss == 0) {
        std::fill(d, d + n, *s);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
      }
    }
  });
}

// Dims `a` and `b` swap which side is contiguous: `a` extends dst's contiguous run, `b` extends
// src's. Runs of `run` elements (1, or the innermost dim both share) move together; a work item
// is one tile of (a, b) for one index of the other dims, so both sides stay within a few pages.
template <class T>
void copy_tiles(T* dst, const T* src, const StridedCopy& c, int a, int b, int64_t run,
                int64_t total) {
  StridedCopy rest;
  for (int d = 0; d < c.rank - (run > 1 ? 1 : 0); ++d) {
    if (d == a || d == b) continue;
    rest.shape[rest.rank] = c.shape[d];
    rest.dst_stride[rest.rank] = c.dst_stride[d];
    rest.src_stride[rest.rank] = c.src_stride[d];
    ++rest.rank;
  }
  const int64_t na = c.shape[a], nb = c.shape[b];
  const int64_t da = c.dst_stride[a], db = c.dst_stride[b];
  const int64_t sa = c.src_stride[a], sb = c.src_stride[b];
  const int64_t tile =
      run == 1 ? kTile : std::clamp<int64_t>(4096 / (run * int64_t{sizeof(T)}), 2, kTile);
  const int64_t ta = (na + tile - 1) / tile, tb = (nb + tile - 1) / tile;
  parallel_for(total / (na * nb * run) * ta * tb, total, [&](int64_t begin, int64_t end) {
    Odometer od{rest.rank, rest.shape, rest.dst_stride, rest.src_stride};
    for (int64_t item = begin; item < end; ++item) {
      const int64_t tile_b = item % tb, tile_a = (item / tb) % ta;
      od.seek(item / (ta * tb));
      const int64_t a0 = tile_a * tile, a1 = std::min(na, a0 + tile);
      const int64_t b0 = tile_b * tile, b1 = std::min(nb, b0 + tile);
      T* d = dst + od.doff;
      const T* s = src + od.soff;
      if (run > 1) {
        for (int64_t ia = a0; ia < a1; ++ia) {
          for (int64_t ib = b0; ib < b1; ++ib) {
            std::memcpy(d + ia * da + ib * db, s + ia * sa + ib * sb,
                        static_cast<size_t>(run) * sizeof(T));
          }
        }
        continue;
      }
      // Single elements (da == sb == 1): contiguous writes, while the tile's source lines stay in
      // L1 between rows (measured faster than staging through a buffer, or tiles of 8 or 16).
      for (int64_t ib = b0; ib < b1; ++ib) {
        for (int64_t ia = a0; ia < a1; ++ia) d[ib * db + ia] = s[ia * sa + ib];
      }
    }
  });
}

// Finds a dim other than `skip` whose stride on one side equals `stride`.
int find_dim(const int64_t* strides, int n, int64_t stride, int skip) {
  for (int d = 0; d < n; ++d) {
    if (d != skip && strides[d] == stride) return d;
  }
  return -1;
}

template <class T>
void copy_typed(void* dst_v, const void* src_v, const StridedCopy& c, int64_t total) {
  T* dst = static_cast<T*>(dst_v);
  const T* src = static_cast<const T*>(src_v);
  if (c.rank == 0) {
    *dst = *src;
    return;
  }
  const int in = c.rank - 1;
  const int64_t len = c.shape[in], ds = c.dst_stride[in], ss = c.src_stride[in];
  if (ds == 1 && ss != 1 && ss != 0) {  // transposes single elements
    const int b = find_dim(c.src_stride, in, 1, -1);
    if (b >= 0) return copy_tiles(dst, src, c, in, b, 1, total);
  } else if (ds == 1 && ss == 1 && len * int64_t{sizeof(T)} < kShortRow) {  // transposes rows
    const int a = find_dim(c.dst_stride, in, len, -1);
    const int b = a < 0 ? -1 : find_dim(c.src_stride, in, len, a);
    if (b >= 0) return copy_tiles(dst, src, c, a, b, len, total);
  }
  copy_rows(dst, src, c, total);
}

}  // namespace

void row_major_strides(const int64_t* shape, int rank, int64_t* out) {
  int64_t acc = 1;
  for (int d = rank; d-- > 0;) {
    out[d] = acc;
    acc *= shape[d];
  }
}

void strided_copy(void* dst, const void* src, size_t esize, StridedCopy c) {
  int64_t total = 1;
  for (int d = 0; d < c.rank; ++d) total *= c.shape[d];
  if (total == 0) return;
  c = simplify(c);
  switch (esize) {
    case 1:
      return copy_typed<uint8_t>(dst, src, c, total);
    case 2:
      return copy_typed<uint16_t>(dst, src, c, total);
    case 4:
      return copy_typed<uint32_t>(dst, src, c, total);
    case 8:
      return copy_typed<uint64_t>(dst, src, c, total);
    default:
      fail("no copy for {}-byte elements", esize);
  }
}

void permute(void* dst, const void* src, size_t esize, const int64_t* in_shape, int rank,
             const int64_t* perm) {
  StridedCopy c;
  c.rank = rank;
  int64_t in_strides[KEEL_MAX_RANK];
  row_major_strides(in_shape, rank, in_strides);
  for (int d = 0; d < rank; ++d) {
    c.shape[d] = in_shape[perm[d]];
    c.src_stride[d] = in_strides[perm[d]];
  }
  row_major_strides(c.shape, rank, c.dst_stride);
  strided_copy(dst, src, esize, c);
}

}  // namespace keel::cpu::detail
