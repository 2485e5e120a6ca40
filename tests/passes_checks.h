#pragma once
// Independent checks of the FusionPlan and MemoryPlan contracts (passes/pipeline.h), written from
// the contract rather than from the planner's code. Each returns every broken rule, one line each.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "passes/pipeline.h"

namespace keel::testing {

// A target whose every reader takes any view and whose every kernel stores through one, so the
// plans' contracts are checked with the most folding and joining a target can ask for.
inline passes::Target strided_target() {
  passes::Target t;
  t.name = "strided (tests)";
  t.reads_view = [](const Node&, size_t, const passes::View&) { return true; };
  t.writes_view = [](const Node&, const passes::View&) { return true; };
  return t;
}

inline bool is_data_leaf(const Node& n) {
  return n.op == Op::parameter || n.op == Op::constant;
}

inline std::vector<std::vector<NodeId>> users_of(const Graph& g) {
  std::vector<std::vector<NodeId>> users(g.size());
  for (size_t u = 0; u < g.size(); ++u) {
    for (NodeId in : g.nodes()[u].inputs) users[in].push_back(static_cast<NodeId>(u));
  }
  return users;
}

inline int64_t bytes_of(const TensorType& t) {
  return numel(t.shape) * static_cast<int64_t>(dtype_size(t.dtype));
}

// A folded layout op: a reshape, transpose, slice or broadcast that is no graph output, over a
// base that is stored (never a view itself), with one stride per dim; read with strides only by
// loops, dot_general and layout ops, and by anything else only when row-major.
inline std::vector<std::string> view_problems(const Graph& g, const passes::FusionPlan& f,
                                              NodeId id,
                                              const std::vector<std::vector<NodeId>>& users) {
  std::vector<std::string> out;
  const passes::View& v = f.views[static_cast<size_t>(id)];
  const Node& n = g.node(id);
  const Op op = n.op;
  if (op != Op::reshape && op != Op::transpose && op != Op::slice && op != Op::broadcast) {
    out.push_back(fmt::format("view %{} is a {}", id, op_name(op)));
  }
  if (std::count(g.outputs().begin(), g.outputs().end(), id)) {
    out.push_back(fmt::format("view %{} is a graph output", id));
  }
  if (v.base >= id || f.is_view(v.base)) out.push_back(fmt::format("view %{} base bad", id));
  if (v.strides.size() != n.type.shape.size()) {
    out.push_back(fmt::format("view %{} has {} strides", id, v.strides.size()));
  }
  int64_t running = 1;
  bool row_major = true;
  for (size_t d = v.strides.size(); d-- > 0;) {
    if (n.type.shape[d] == 1) continue;
    row_major = row_major && v.strides[d] == running;
    running *= n.type.shape[d];
  }
  if (row_major != v.contiguous) out.push_back(fmt::format("view %{} contiguous flag", id));
  for (NodeId u : users[static_cast<size_t>(id)]) {
    const Op uo = g.node(u).op;
    const bool strided_ok = is_elementwise(uo) || uo == Op::reduce_sum || uo == Op::reduce_max ||
                            uo == Op::reduce_mean || uo == Op::dot_general || uo == Op::reshape ||
                            uo == Op::transpose || uo == Op::slice || uo == Op::broadcast ||
                            uo == Op::concat;
    if (!strided_ok && !v.contiguous) {
      out.push_back(fmt::format("strided view %{} is read by %{} ({})", id, u, op_name(uo)));
    }
  }
  return out;
}

inline std::vector<std::string> fusion_problems(const Graph& g, const passes::FusionPlan& f) {
  std::vector<std::string> out;
  auto bad = [&](std::string s) { out.push_back(std::move(s)); };
  if (f.group_of.size() != g.size()) return {"group_of does not cover the graph"};
  const auto users = users_of(g);
  std::set<NodeId> graph_outputs(g.outputs().begin(), g.outputs().end());
  std::vector<int> seen(g.size(), 0);
  for (size_t k = 0; k < f.groups.size(); ++k) {
    const passes::FusionGroup& grp = f.groups[k];
    if (grp.nodes.empty()) {
      bad(fmt::format("group {} is empty", k));
      continue;
    }
    if (!std::is_sorted(grp.nodes.begin(), grp.nodes.end())) bad(fmt::format("g{} unsorted", k));
    const NodeId root = grp.nodes.back();
    const Node& r = g.node(root);
    std::set<NodeId> want_outputs{root};
    for (NodeId id : grp.nodes) {
      ++seen[id];
      if (f.group_of[id] != static_cast<int32_t>(k)) bad(fmt::format("%{} group_of mismatch", id));
      const Node& n = g.node(id);
      for (NodeId in : n.inputs) {
        const NodeId src = f.storage_of(in);  // a view is read from its base's buffer
        int32_t gi = f.group_of[src];
        if (!is_data_leaf(g.node(src)) && gi > static_cast<int32_t>(k)) {
          bad(fmt::format("g{} reads %{} from later group g{}", k, in, gi));
        }
      }
      bool outside = graph_outputs.count(id) > 0;
      for (NodeId u : users[id]) outside = outside || f.group_of[u] != static_cast<int32_t>(k);
      if (outside) want_outputs.insert(id);
      if (grp.kind == passes::GroupKind::Single) continue;
      if (id != root && !is_elementwise(n.op)) bad(fmt::format("g{}: %{} not elementwise", k, id));
      const Shape& want = grp.kind == passes::GroupKind::Elementwise
                              ? r.type.shape
                              : g.node(r.inputs.at(0)).type.shape;
      if (id != root && n.type.shape != want) bad(fmt::format("g{}: %{} shape differs", k, id));
    }
    const std::vector<NodeId> outs(want_outputs.begin(), want_outputs.end());
    switch (grp.kind) {
      case passes::GroupKind::Elementwise:
        if (!is_elementwise(r.op)) bad(fmt::format("g{}: root not elementwise", k));
        if (grp.outputs != outs) bad(fmt::format("g{}: outputs are not the used-outside set", k));
        break;
      case passes::GroupKind::Reduction:
        if (r.op != Op::reduce_sum && r.op != Op::reduce_max && r.op != Op::reduce_mean) {
          bad(fmt::format("g{}: reduction root is {}", k, op_name(r.op)));
        }
        // Besides the root, only casts absorbed for their readers (stored by its loop).
        for (NodeId o : outs) {
          if (o != root && g.node(o).op != Op::cast)
            bad(fmt::format("g{}: reduction internal %{} is read outside the group", k, o));
        }
        if (grp.outputs != outs) bad(fmt::format("g{}: outputs are not the used-outside set", k));
        break;
      case passes::GroupKind::Single:
        if (g.node(grp.nodes.front()).op == Op::scan) {
          // A scan with its results, which are the group's outputs.
          const std::vector<NodeId> results(grp.nodes.begin() + 1, grp.nodes.end());
          if (grp.outputs != results) bad(fmt::format("g{}: scan outputs are not its results", k));
          for (NodeId id : results) {
            if (g.node(id).op != Op::scan_result) bad(fmt::format("g{}: %{} not a result", k, id));
          }
          break;
        }
        // One node, or kernels the target runs in one call: each is written, so each an output.
        if (grp.outputs != grp.nodes) bad(fmt::format("g{} single", k));
        for (NodeId id : grp.nodes) {
          if (grp.nodes.size() > 1 &&
              (is_elementwise(g.node(id).op) || op_info(g.node(id).op).kind == OpKind::Reduce))
            bad(fmt::format("g{}: %{} is not a kernel but shares a call", k, id));
        }
        break;
    }
  }
  if (!f.views.empty() && f.views.size() != g.size()) bad("views do not cover the graph");
  for (size_t i = 0; i < g.size(); ++i) {
    const bool leaf = is_data_leaf(g.nodes()[i]);
    const bool view = f.is_view(static_cast<NodeId>(i));
    if (view) {
      for (std::string& p : view_problems(g, f, static_cast<NodeId>(i), users)) bad(std::move(p));
      if (f.group_of[i] != -1 || seen[i]) bad(fmt::format("view %{} is grouped", i));
      continue;
    }
    if (leaf && (f.group_of[i] != -1 || seen[i])) bad(fmt::format("leaf %{} is grouped", i));
    if (!leaf && seen[i] != 1) bad(fmt::format("%{} is in {} groups", i, seen[i]));
  }
  return out;
}

// Arena buffers: group outputs that are not program outputs, live from their writer group to
// their last reader group.
struct LiveBuffer {
  NodeId node;
  int32_t first, last;
  int64_t bytes;
};

inline std::vector<LiveBuffer> live_buffers(const Graph& g, const passes::FusionPlan& f,
                                            const passes::LoweredBodies& bodies) {
  std::set<NodeId> graph_outputs(g.outputs().begin(), g.outputs().end());
  const auto users = users_of(g);
  std::vector<LiveBuffer> bufs;
  for (size_t k = 0; k < f.groups.size(); ++k) {
    const NodeId first = f.groups[k].nodes.front();
    if (g.node(first).op == Op::scan) {  // the scan's workspace, live while it runs
      const int32_t at = static_cast<int32_t>(k);
      const auto body = bodies.find(first);
      const int64_t bytes =
          body == bodies.end() ? 0 : passes::scan_workspace_bytes(g.node(first), *body->second);
      bufs.push_back({first, at, at, bytes});
    }
    for (NodeId id : f.groups[k].outputs) {
      if (graph_outputs.count(id)) continue;
      int32_t last = static_cast<int32_t>(k);
      // Readers of the views of this buffer read it too.
      for (size_t u = 0; u < g.size(); ++u) {
        for (NodeId in : g.nodes()[u].inputs) {
          if (f.storage_of(in) == id && f.group_of[u] >= 0) last = std::max(last, f.group_of[u]);
        }
      }
      bufs.push_back({id, static_cast<int32_t>(k), last, bytes_of(g.node(id).type)});
    }
  }
  return bufs;
}

// `bodies`: the scans' lowered bodies (lower_scan_bodies), which size their workspaces.
inline std::vector<std::string> memory_problems(const Graph& g, const passes::FusionPlan& f,
                                                const passes::MemoryPlan& m,
                                                const passes::LoweredBodies& bodies = {},
                                                int64_t alignment = 64) {
  std::vector<std::string> out;
  auto bad = [&](std::string s) { out.push_back(std::move(s)); };
  if (m.offset.size() != g.size()) return {"offset does not cover the graph"};
  for (size_t i = 0; i < g.size(); ++i) {
    if (g.nodes()[i].op == Op::scan && !bodies.count(static_cast<NodeId>(i))) {
      bad(fmt::format("scan %{} has no lowered body to size its workspace", i));
    }
  }
  const std::vector<LiveBuffer> bufs = live_buffers(g, f, bodies);
  std::vector<int> stored(g.size(), 0);
  for (const LiveBuffer& b : bufs) {
    stored[b.node] = 1;
    const int64_t off = m.offset[b.node];
    if (off < 0 || off % alignment != 0) {
      bad(fmt::format("%{} offset {} not aligned", b.node, off));
    }
    if (off + b.bytes > m.arena_bytes) bad(fmt::format("%{} ends past the arena", b.node));
  }
  for (size_t i = 0; i < g.size(); ++i) {
    if (!stored[i] && m.offset[i] != -1) bad(fmt::format("%{} has an offset; want -1", i));
  }
  for (size_t a = 0; a < bufs.size(); ++a) {
    for (size_t b = a + 1; b < bufs.size(); ++b) {
      const LiveBuffer &x = bufs[a], &y = bufs[b];
      if (x.first > y.last || y.first > x.last || x.bytes == 0 || y.bytes == 0) continue;
      const int64_t xo = m.offset[x.node], yo = m.offset[y.node];
      if (xo < yo + y.bytes && yo < xo + x.bytes) {
        bad(fmt::format("%{} and %{} are live together and overlap", x.node, y.node));
      }
    }
  }
  int64_t in = 0, outb = 0, consts = 0;
  for (NodeId p : g.params()) in += bytes_of(g.node(p).type);
  for (NodeId o : g.outputs()) outb += bytes_of(g.node(o).type);
  for (const Node& n : g.nodes()) consts += n.op == Op::constant ? bytes_of(n.type) : 0;
  if (m.input_bytes != in || m.output_bytes != outb) bad("input/output bytes are wrong");
  if (m.predicted_peak_bytes != m.arena_bytes + in + outb + consts) bad("peak is not the sum");
  return out;
}

}  // namespace keel::testing
