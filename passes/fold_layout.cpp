// fold_layout: reshapes, transposes, slices and broadcasts become views (an offset and strides
// into a stored buffer) when every reader can index that buffer itself, so no copy runs. Any
// reader takes a contiguous view; a strided one only readers the target names (reads_view).
#include <fmt/format.h>

#include <optional>

#include "passes/pipeline.h"

namespace keel::passes {

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 0);
  int64_t running = 1;
  for (size_t d = s.size(); d-- > 0;) {
    st[d] = running;
    running *= s[d];
  }
  return st;
}

std::optional<std::vector<int64_t>> reshape_strides(const Shape& from,
                                                    const std::vector<int64_t>& st,
                                                    const Shape& to) {
  std::vector<int64_t> od, os;
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] == 1) continue;
    od.push_back(from[d]);
    os.push_back(st[d]);
  }
  std::vector<int64_t> ns(to.size(), 0);
  size_t oi = 0, ni = 0;
  while (oi < od.size()) {
    while (ni < to.size() && to[ni] == 1) ++ni;  // size-1 dims take stride 0
    if (ni == to.size()) return std::nullopt;
    size_t oj = oi + 1, nj = ni + 1;
    int64_t op = od[oi], np = to[ni];
    while (op != np) {
      if (np < op) {
        if (nj == to.size()) return std::nullopt;
        np *= to[nj++];
      } else {
        if (oj == od.size()) return std::nullopt;
        op *= od[oj++];
      }
    }
    for (size_t k = oi; k + 1 < oj; ++k) {
      if (os[k] != od[k + 1] * os[k + 1]) return std::nullopt;
    }
    ns[nj - 1] = os[oj - 1];
    for (size_t k = nj - 1; k > ni; --k) ns[k - 1] = to[k] == 1 ? ns[k] : ns[k] * to[k];
    for (size_t k = ni; k < nj; ++k) {
      if (to[k] == 1) ns[k] = 0;
    }
    oi = oj;
    ni = nj;
  }
  return ns;
}

bool is_layout(Op op) {
  return op == Op::reshape || op == Op::transpose || op == Op::slice || op == Op::broadcast;
}

namespace {

// Row-major over `s`, ignoring size-1 dims (their stride is never used).
bool is_row_major(const Shape& s, const std::vector<int64_t>& st) {
  int64_t running = 1;
  for (size_t d = s.size(); d-- > 0;) {
    if (s[d] == 1) continue;
    if (st[d] != running) return false;
    running *= s[d];
  }
  return true;
}

class Folder {
 public:
  Folder(const Graph& g, const Target& target)
      : g_(g), target_(target), users_(g.size()), candidate_(g.size(), 0) {
    std::vector<char> is_output(g.size(), 0);
    for (NodeId o : g.outputs()) is_output[static_cast<size_t>(o)] = 1;
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      for (NodeId in : n.inputs) users_[static_cast<size_t>(in)].push_back(static_cast<NodeId>(i));
      candidate_[i] = is_layout(n.op) && !is_output[i] && numel(n.type.shape) > 0;
    }
  }

  // Demotions only grow (a demoted node is stored, which only makes its readers' views easier),
  // so alternating the two sweeps reaches a fixed point.
  std::vector<View> run() {
    do {
      forward();
    } while (demote_unread());
    return std::move(views_);
  }

 private:
  void forward() {
    views_.assign(g_.size(), View{});
    for (size_t i = 0; i < g_.size(); ++i) {
      if (!candidate_[i]) continue;
      const Node& n = g_.nodes()[i];
      const NodeId in = n.inputs[0];
      const Shape& in_shape = g_.node(in).type.shape;
      const View& src = views_[static_cast<size_t>(in)];
      const View stored{in, 0, row_major_strides(in_shape), true};
      std::optional<View> v = layout_view(n, in_shape, src.base >= 0 ? src : stored);
      if (v) views_[i] = std::move(*v);
    }
  }

  // Demotes views some reader cannot index; true when any was.
  bool demote_unread() {
    bool changed = false;
    for (size_t i = g_.size(); i-- > 0;) {
      const View& v = views_[i];
      if (v.base < 0 || v.contiguous) continue;
      for (NodeId u : users_[i]) {
        const Node& reader = g_.node(u);
        bool ok = views_[static_cast<size_t>(u)].base >= 0;
        for (size_t k = 0; !ok && k < reader.inputs.size(); ++k) {
          if (reader.inputs[k] == static_cast<NodeId>(i)) {
            ok = target_.reads_view && target_.reads_view(reader, k, v);
          }
        }
        if (!ok) {
          candidate_[i] = 0;
          views_[i] = View{};
          changed = true;
          break;
        }
      }
    }
    return changed;
  }

  const Graph& g_;
  const Target& target_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<char> candidate_;
  std::vector<View> views_;
};

}  // namespace

std::optional<View> layout_view(const Node& n, const Shape& in_shape, const View& in) {
  const Shape& out = n.type.shape;
  View v;
  v.base = in.base;
  v.offset = in.offset;
  switch (n.op) {
    case Op::reshape: {
      std::optional<std::vector<int64_t>> st = reshape_strides(in_shape, in.strides, out);
      if (!st) return std::nullopt;
      v.strides = std::move(*st);
      break;
    }
    case Op::transpose:
      for (int64_t p : n.attrs.ints("perm")) v.strides.push_back(in.strides[p]);
      break;
    case Op::slice: {
      const std::vector<int64_t>& start = n.attrs.ints("start");
      const std::vector<int64_t>& step = n.attrs.ints("stride");
      for (size_t d = 0; d < out.size(); ++d) {
        v.offset += start[d] * in.strides[d];
        v.strides.push_back(in.strides[d] * step[d]);
      }
      break;
    }
    case Op::broadcast: {
      const size_t lead = out.size() - in_shape.size();
      for (size_t d = 0; d < out.size(); ++d) {
        const bool fresh = d < lead || (in_shape[d - lead] == 1 && out[d] != 1);
        v.strides.push_back(fresh ? 0 : in.strides[d - lead]);
      }
      break;
    }
    default:
      return std::nullopt;
  }
  v.contiguous = is_row_major(out, v.strides);
  return v;
}

std::vector<View> fold_layout(const Graph& g, bool enabled, const Target& target) {
  if (!enabled) return {};
  return Folder(g, target).run();
}

std::string print_views(const std::vector<View>& views) {
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    const View& v = views[i];
    if (v.base < 0) continue;
    out += fmt::format("%{} view of %{} offset={} strides=[{}]{}\n", i, v.base, v.offset,
                       fmt::join(v.strides, ","), v.contiguous ? " contiguous" : "");
    ++n;
  }
  return out + fmt::format("{} views\n", n);
}

}  // namespace keel::passes
