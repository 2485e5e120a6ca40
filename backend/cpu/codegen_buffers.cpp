// Where each value lives: program inputs and outputs, static constants, the planned arena, or
// codegen scratch past the arena for buffers the memory plan did not place (plan_memory off).
#include <algorithm>

#include "backend/cpu/codegen_internal.h"

namespace keel::cpu::gen {
namespace {

bool scalar_constant(const Graph& g, const Load& l) {
  return g.node(l.storage).op == Op::constant && numel(g.node(l.node).type.shape) == 1;
}

}  // namespace

std::pair<int64_t, int64_t> Buffers::arena_range(const Graph& g, NodeId id) const {
  id = storage_of(id);
  const Node& n = g.node(id);
  if (n.op == Op::parameter || n.op == Op::constant || out_slot[id] >= 0) return {-1, -1};
  const int64_t off = memory->offset[id] >= 0 ? memory->offset[id] : arena_bytes + scratch[id];
  return {off, off + n.type.bytes()};
}

int64_t Buffers::partials(int64_t bytes) {
  if (bytes > partials_bytes) {
    partials_offset = arena_bytes + scratch_bytes;
    partials_bytes = (bytes + 63) / 64 * 64;
    scratch_bytes += partials_bytes;
  }
  return partials_offset;
}

Buffers assign_buffers(const Graph& g, const passes::MemoryPlan& memory,
                       const passes::FusionPlan& fusion, const std::vector<Unit>& units) {
  Buffers b;
  b.memory = &memory;
  b.fusion = &fusion;
  b.arena_bytes = memory.arena_bytes;
  b.needed.assign(g.size(), 0);
  b.scratch.assign(g.size(), -1);
  b.out_slot.assign(g.size(), -1);
  if (memory.offset.size() != g.size()) {
    fail("internal: the memory plan covers {} nodes but graph '{}' has {}", memory.offset.size(),
         g.name(), g.size());
  }
  for (const Unit& u : units) {
    for (const Load& l : u.loads) {
      if (!scalar_constant(g, l)) b.needed[l.storage] = 1;
    }
    for (NodeId s : u.stores) b.needed[s] = 1;
    if (u.kind == UnitKind::Reduce || u.kind == UnitKind::Kernel) b.needed[u.root] = 1;
    for (NodeId also : u.also) {  // results of the same call, and what it reads for them
      b.needed[also] = 1;
      for (NodeId in : g.node(also).inputs) b.needed[in] = 1;
    }
    if (u.kind == UnitKind::Kernel || u.kind == UnitKind::Scan) {
      for (NodeId in : g.node(u.root).inputs) b.needed[in] = 1;
    }
  }
  for (size_t j = 0; j < g.outputs().size(); ++j) {
    const NodeId o = g.outputs()[j];
    b.needed[o] = 1;
    const Op op = g.node(o).op;
    if (b.out_slot[o] < 0 && op != Op::parameter && op != Op::constant) {
      b.out_slot[o] = static_cast<int32_t>(j);
    }
  }
  for (size_t id = 0; id < g.size(); ++id) {
    if (b.needed[id] && b.view(static_cast<NodeId>(id))) b.needed[b.storage_of(id)] = 1;
  }
  place_donated_outputs(g, units, b);
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.nodes()[id];
    if (!b.needed[id] || n.op == Op::parameter || n.op == Op::constant || b.out_slot[id] >= 0 ||
        b.view(static_cast<NodeId>(id))) {
      continue;
    }
    const int64_t off = memory.offset[id];
    if (off >= 0) {
      if (off % static_cast<int64_t>(dtype_size(n.type.dtype)) != 0) {
        fail("internal: the memory plan puts {} at misaligned offset {}", describe(g, id), off);
      }
      if (off + n.type.bytes() > memory.arena_bytes) {
        fail("internal: the memory plan puts {} at [{}, {}) past the {}-byte arena",
             describe(g, id), off, off + n.type.bytes(), memory.arena_bytes);
      }
      continue;
    }
    b.scratch[id] = b.scratch_bytes;
    b.scratch_bytes += (n.type.bytes() + 63) / 64 * 64;
  }
  b.early_temp.assign(g.outputs().size(), -1);
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    if (!b.early_copy[k] || g.output_alias(k) < 0) continue;
    b.early_temp[k] = b.scratch_bytes;
    b.scratch_bytes += (g.node(g.outputs()[k]).type.bytes() + 63) / 64 * 64;
  }
  return b;
}

std::vector<NodeId> touched(const Graph& g, const Buffers& b, const Unit& u) {
  std::vector<NodeId> ids;
  for (const Load& l : u.loads) ids.push_back(l.storage);
  ids.insert(ids.end(), u.stores.begin(), u.stores.end());
  if (u.kind == UnitKind::Reduce || u.kind == UnitKind::Kernel) ids.push_back(u.root);
  if (u.kind == UnitKind::Kernel || u.kind == UnitKind::Scan) {
    const auto& in = g.node(u.root).inputs;
    ids.insert(ids.end(), in.begin(), in.end());
  }
  for (NodeId also : u.also) {
    ids.push_back(also);
    const auto& in = g.node(also).inputs;
    ids.insert(ids.end(), in.begin(), in.end());
  }
  for (size_t i = 0, n = ids.size(); i < n; ++i) {
    if (b.view(ids[i])) ids.push_back(b.storage_of(ids[i]));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string declare_buffers(const Graph& g, const Buffers& b, const std::vector<NodeId>& ids) {
  std::vector<int32_t> param_index(g.size(), -1);
  for (size_t i = 0; i < g.params().size(); ++i) {
    param_index[g.params()[i]] = static_cast<int32_t>(i);
  }
  std::string s, views;
  for (NodeId id : ids) {
    if (!b.needed[id]) continue;
    const Node& n = g.node(id);
    const std::string_view t = storage_type(n.type.dtype);
    if (const passes::View* v = b.view(id)) {
      // After every buffer: a result written into a concat's buffer views a later node.
      views += fmt::format("  {}{}* v{} = v{} + {};  // a view of %{}\n",
                           v->base > id ? "" : "const ", t, id, v->base, v->offset, v->base);
    } else if (n.op == Op::parameter) {
      if (param_index[id] < 0) fail("internal: {} is not among the graph's parameters", id);
      s += fmt::format("  const {0}* v{1} = static_cast<const {0}*>(in[{2}]);\n", t, id,
                       param_index[id]);
    } else if (n.op == Op::constant) {
      const std::string src =
          numel(n.type.shape) > 0 ? fmt::format("{}c{}", b.prefix, id) : "nullptr";
      s += fmt::format("  const {}* v{} = {};\n", t, id, src);
    } else if (b.out_slot[id] >= 0 && g.output_alias(static_cast<size_t>(b.out_slot[id])) >= 0) {
      // A donated output lives in its parameter's buffer.
      s += fmt::format("  {0}* v{1} = static_cast<{0}*>(const_cast<void*>(in[{2}]));\n", t, id,
                       g.output_alias(static_cast<size_t>(b.out_slot[id])));
    } else if (b.out_slot[id] >= 0) {
      s += fmt::format("  {0}* v{1} = static_cast<{0}*>(out[{2}]);\n", t, id, b.out_slot[id]);
    } else {
      const int64_t off =
          b.memory->offset[id] >= 0 ? b.memory->offset[id] : b.arena_bytes + b.scratch[id];
      s += fmt::format("  {0}* v{1} = reinterpret_cast<{0}*>(A + {2});\n", t, id, off);
    }
  }
  return s + views;
}

}  // namespace keel::cpu::gen
