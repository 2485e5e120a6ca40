// Loop nests over static shapes. Merging dims every access walks contiguously (or not at all)
// turns most broadcasts into a two-level loop whose inner level is unit-stride or invariant,
// which is what the C++ compiler vectorises.
#include "backend/c_source/c_source.h"

namespace keel::c_source {

Nest build_nest(const Shape& loop, const std::vector<bool>& reduced,
                const std::vector<Access>& accesses) {
  const size_t n = loop.size();
  std::vector<std::vector<int64_t>> st(accesses.size(), std::vector<int64_t>(n, 0));
  for (size_t a = 0; a < accesses.size(); ++a) {
    const Shape& xs = accesses[a].shape;
    const std::vector<int64_t>& given = accesses[a].strides;
    if (!given.empty() && given.size() != xs.size()) {
      fail("internal: access {} has {} strides for shape {}", a, given.size(), shape_str(xs));
    }
    if (xs.size() > n)
      fail("internal: access {} has more dims than the loop {}", a, shape_str(loop));
    const size_t lead = n - xs.size();
    int64_t running = 1;
    for (size_t d = n; d-- > lead;) {
      const int64_t x = xs[d - lead];
      if (x != 1 && x != loop[d]) {
        fail("internal: access shape {} does not broadcast to loop {}", shape_str(xs),
             shape_str(loop));
      }
      st[a][d] = x == 1 ? 0 : given.empty() ? running : given[d - lead];
      running *= x;
    }
  }
  Nest out;
  out.strides.resize(accesses.size());
  for (size_t d = 0; d < n; ++d) {
    if (loop[d] == 1) continue;
    bool merge = !out.size.empty() && out.reduced.back() == reduced[d];
    for (size_t a = 0; a < accesses.size() && merge; ++a) {
      const int64_t prev = out.strides[a].back();
      merge = (prev == 0 && st[a][d] == 0) || (prev != 0 && prev == st[a][d] * loop[d]);
    }
    if (merge) {
      out.size.back() *= loop[d];
      for (size_t a = 0; a < accesses.size(); ++a) out.strides[a].back() = st[a][d];
    } else {
      out.size.push_back(loop[d]);
      out.reduced.push_back(reduced[d]);
      for (size_t a = 0; a < accesses.size(); ++a) out.strides[a].push_back(st[a][d]);
    }
  }
  if (out.size.empty()) {  // one element: a single iteration of a one-dim loop
    out.size.push_back(1);
    out.reduced.push_back(false);
    for (auto& s : out.strides) s.push_back(0);
  }
  return out;
}

std::vector<std::string> split_index(const Nest& nest, const std::vector<size_t>& dims,
                                     const std::string& counter) {
  std::vector<std::string> idx(dims.size());
  int64_t below = 1;  // product of the sizes of later dims
  for (size_t k = dims.size(); k-- > 0;) {
    const int64_t m = nest.size[dims[k]];
    const std::string q = below == 1 ? counter : fmt::format("({} / {})", counter, below);
    idx[k] = k == 0 ? q : fmt::format("({} % {})", q, m);
    below *= m;
  }
  return idx;
}

std::string offset_expr(const std::vector<int64_t>& strides, const std::vector<size_t>& dims,
                        const std::vector<std::string>& idx) {
  std::string s;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t st = strides[dims[k]];
    if (st == 0) continue;
    if (!s.empty()) s += " + ";
    s += st == 1 ? idx[k] : fmt::format("{} * {}", idx[k], st);
  }
  return s.empty() ? "0" : s;
}

}  // namespace keel::c_source
