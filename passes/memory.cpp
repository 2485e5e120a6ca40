// plan_memory: places every stored intermediate in one scratch arena. Buffers are placed
// largest first, each into the tightest gap left by the buffers already placed that are live at
// the same time (greedy by size, best fit), which never needs more than one range per buffer.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ir/error.h"
#include "ir/scan.h"
#include "passes/pipeline.h"

namespace keel::passes {
namespace {

int64_t align_up(int64_t n, int64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

struct Buffer {
  NodeId node;
  int32_t first;  // group that writes it
  int32_t last;   // last group that reads it (inclusive)
  int64_t size;   // aligned bytes
  int64_t offset = -1;
};

bool live_together(const Buffer& a, const Buffer& b) {
  return a.first <= b.last && b.first <= a.last;
}

void check_plan(const Graph& g, const FusionPlan& f) {
  if (f.group_of.size() != g.size()) {
    throw Error(
        fmt::format("[passes] plan_memory: the fusion plan covers {} nodes but graph '{}' "
                    "has {}; run fuse on this graph first",
                    f.group_of.size(), g.name(), g.size()));
  }
}

// Stored values in schedule order, with the range of groups over which each one is live.
std::vector<Buffer> collect(const Graph& g, const FusionPlan& f, const LoweredBodies& bodies,
                            int64_t alignment) {
  std::vector<char> is_output(g.size(), 0);
  for (NodeId o : g.outputs()) is_output.at(static_cast<size_t>(o)) = 1;
  std::vector<int32_t> index(g.size(), -1);
  std::vector<Buffer> bufs;
  for (size_t k = 0; k < f.groups.size(); ++k) {
    const NodeId first = f.groups[k].nodes.empty() ? -1 : f.groups[k].nodes.front();
    if (first >= 0 && g.node(first).op == Op::scan) {
      // The loop's working memory (its carry buffers and the body's arena), live during it.
      index[static_cast<size_t>(first)] = static_cast<int32_t>(bufs.size());
      const int32_t at = static_cast<int32_t>(k);
      const auto body = bodies.find(first);
      if (body == bodies.end()) {
        throw Error(fmt::format(
            "[passes] internal: plan_memory was given no lowered body for scan %{} of graph "
            "'{}'; pass lower_scan_bodies of the graph",
            first, g.name()));
      }
      const int64_t workspace = scan_workspace_bytes(g.node(first), *body->second);
      bufs.push_back({first, at, at, align_up(workspace, alignment)});
    }
    for (NodeId id : f.groups[k].outputs) {
      // A result written into a later node's buffer (concat_in_place) makes it live from here.
      if (f.is_view(id)) id = f.storage_of(id);
      const Node& n = g.node(id);
      const size_t i = static_cast<size_t>(id);
      if (is_output[i] || n.op == Op::parameter || n.op == Op::constant || index[i] >= 0) continue;
      index[i] = static_cast<int32_t>(bufs.size());
      const int32_t at = static_cast<int32_t>(k);
      bufs.push_back({id, at, at, align_up(n.type.bytes(), alignment)});
    }
  }
  // A view has no group: its readers keep its base's buffer alive.
  for (size_t u = 0; u < g.size(); ++u) {
    if (f.group_of[u] < 0) continue;
    for (NodeId in : g.nodes()[u].inputs) {
      const int32_t b = index[static_cast<size_t>(f.storage_of(in))];
      if (b >= 0) bufs[b].last = std::max(bufs[b].last, f.group_of[u]);
    }
  }
  return bufs;
}

// Best-fit gap among the placed buffers (sorted by offset) live at the same time as `b`.
int64_t place(const Buffer& b, const std::vector<Buffer>& bufs, const std::vector<size_t>& placed) {
  int64_t best = -1, best_gap = 0, cursor = 0;
  for (size_t j : placed) {
    const Buffer& o = bufs[j];
    if (o.size == 0 || !live_together(b, o)) continue;
    const int64_t gap = o.offset - cursor;
    if (gap >= b.size && (best < 0 || gap < best_gap)) {
      best = cursor;
      best_gap = gap;
    }
    cursor = std::max(cursor, o.offset + o.size);
  }
  return best >= 0 ? best : cursor;
}

}  // namespace

int64_t scan_carry_bytes(const Node& scan, const Target& target) {
  if (!target.scan_spare_carries) return 0;
  const ScanInfo s = scan_info(scan.attrs, scan.inputs.size());
  int64_t bytes = 0;
  for (int64_t c = 0; c < s.carries; ++c) {
    const int64_t carry = s.body->node(s.body->params()[static_cast<size_t>(c)]).type.bytes();
    bytes += align_up(carry, target.alignment);
  }
  return bytes;
}

PassOptions body_pass_options(const PassOptions& options) {
  PassOptions body = options;
  body.dump_dir.clear();
  return body;
}

LoweredBodies lower_scan_bodies(const Graph& g, const PassOptions& options) {
  LoweredBodies bodies;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op != Op::scan) continue;
    bodies[static_cast<NodeId>(i)] =
        std::make_shared<const Lowered>(lower(n.attrs.graph("body"), body_pass_options(options)));
  }
  return bodies;
}

int64_t scan_workspace_bytes(const Node& scan, const Lowered& body) {
  return scan_carry_bytes(scan, body.options.target) + body.memory.arena_bytes;
}

MemoryPlan plan_memory(const Graph& g, const FusionPlan& fusion, bool reuse,
                       const LoweredBodies& bodies, const Target& target) {
  check_plan(g, fusion);
  std::vector<Buffer> bufs = collect(g, fusion, bodies, target.alignment);
  if (reuse) {
    std::vector<size_t> order(bufs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return bufs[a].size != bufs[b].size ? bufs[a].size > bufs[b].size
                                          : bufs[a].first < bufs[b].first;
    });
    std::vector<size_t> placed;  // kept sorted by offset, so each scan sees gaps in order
    for (size_t i : order) {
      bufs[i].offset = place(bufs[i], bufs, placed);
      auto at = std::upper_bound(placed.begin(), placed.end(), bufs[i].offset,
                                 [&](int64_t off, size_t j) { return off < bufs[j].offset; });
      placed.insert(at, i);
    }
  } else {
    int64_t cursor = 0;
    for (Buffer& b : bufs) {
      b.offset = cursor;
      cursor += b.size;
    }
  }
  MemoryPlan plan;
  plan.offset.assign(g.size(), -1);
  for (const Buffer& b : bufs) {
    plan.offset[static_cast<size_t>(b.node)] = b.offset;
    plan.arena_bytes = std::max(plan.arena_bytes, b.offset + b.size);
  }
  int64_t constant_bytes = 0;
  for (const Node& n : g.nodes()) {
    if (n.op == Op::constant) constant_bytes += n.type.bytes();
  }
  for (NodeId p : g.params()) plan.input_bytes += g.node(p).type.bytes();
  // A donated output is written into its parameter's buffer, which input_bytes already counts.
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    if (g.output_alias(k) < 0) plan.output_bytes += g.node(g.outputs()[k]).type.bytes();
  }
  plan.predicted_peak_bytes =
      plan.arena_bytes + plan.input_bytes + plan.output_bytes + constant_bytes;
  return plan;
}

}  // namespace keel::passes
