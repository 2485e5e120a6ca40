#include "ir/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/error.h"
#include "ir/source_loc.h"

namespace keel {

std::string SourceLoc::str() const {
  return known() ? fmt::format("{}:{}", file, line) : std::string("<unknown>");
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ","));
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw Error(fmt::format("shapes {} and {} do not broadcast (dimension {}: {} vs {})",
                              shape_str(a), shape_str(b), i, da, db));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcastable_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != 1 && from[i] != to[i + off]) return false;
  }
  return true;
}

int64_t normalize_axis(int64_t axis, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) {
    throw Error(fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  return axis < 0 ? axis + r : axis;
}

}  // namespace keel
