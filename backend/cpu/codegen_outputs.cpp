// Program outputs. A donated output (the graph writes output k into parameter a's buffer) is
// computed straight into that buffer when nothing reads the parameter afterwards, else into
// scratch and copied at the end; an output that is a donated parameter is copied before anything
// runs. Other outputs that are parameters, constants or repeats are copied at the end.
#include <algorithm>

#include "backend/cpu/codegen_internal.h"

namespace keel::cpu::gen {
namespace {

// The buffers a unit reads (a view's base for a view).
std::vector<NodeId> reads(const Graph& g, const Buffers& b, const Unit& u) {
  std::vector<NodeId> ids;
  for (const Load& l : u.loads) ids.push_back(b.storage_of(l.storage));
  if (u.kind == UnitKind::Kernel || u.kind == UnitKind::Scan) {
    for (NodeId in : g.node(u.root).inputs) ids.push_back(b.storage_of(in));
  }
  return ids;
}

bool writes(const Unit& u, NodeId id) {
  if ((u.kind == UnitKind::Reduce || u.kind == UnitKind::Kernel) && u.root == id) return true;
  return std::find(u.stores.begin(), u.stores.end(), id) != u.stores.end();
}

// A loop reads `param` only at the element it writes: every load of it has the loop's shape
// and reads the buffer itself, not a view of it.
bool same_element(const Graph& g, const Buffers& b, const Unit& u, NodeId param) {
  if (u.kind != UnitKind::Loop) return false;
  const Shape& shape = g.node(u.root).type.shape;
  return std::all_of(u.loads.begin(), u.loads.end(), [&](const Load& l) {
    if (b.storage_of(l.storage) != param) return true;
    return l.storage == param && g.node(l.node).type.shape == shape;
  });
}

bool in_place_ok(const Graph& g, const Buffers& b, const std::vector<Unit>& units, NodeId node,
                 NodeId param) {
  size_t writer = units.size();
  for (size_t i = 0; i < units.size() && writer == units.size(); ++i) {
    if (writes(units[i], node)) writer = i;
  }
  if (writer == units.size()) return false;
  for (size_t i = 0; i < units.size(); ++i) {
    const std::vector<NodeId> r = reads(g, b, units[i]);
    if (std::find(r.begin(), r.end(), param) == r.end()) continue;
    if (i > writer || (i == writer && !same_element(g, b, units[i], param))) return false;
  }
  return true;
}

}  // namespace

void place_donated_outputs(const Graph& g, const std::vector<Unit>& units, Buffers& b) {
  b.into_param.assign(g.size(), -1);
  b.early_copy.assign(g.outputs().size(), 0);
  std::vector<char> donated(g.size(), 0);  // parameters some other value is written into
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const int32_t a = g.output_alias(k);
    if (a >= 0 && g.outputs()[k] != g.params()[static_cast<size_t>(a)]) {
      donated[g.params()[static_cast<size_t>(a)]] = 1;
    }
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const NodeId o = g.outputs()[k];
    const int32_t a = g.output_alias(k);
    // A donated parameter returned as an output is read before anything overwrites it.
    if (donated[o] && !(a >= 0 && g.params()[static_cast<size_t>(a)] == o)) b.early_copy[k] = 1;
    if (a < 0 || b.out_slot[o] != static_cast<int32_t>(k)) continue;
    const NodeId p = g.params()[static_cast<size_t>(a)];
    if (in_place_ok(g, b, units, o, p)) {
      b.into_param[o] = p;
    } else {
      b.out_slot[o] = -1;  // scratch, then a copy at the end
    }
  }
}

OutputCopies output_copies(const Graph& g, const Buffers& b) {
  OutputCopies c;
  std::vector<NodeId> sources;
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const NodeId o = g.outputs()[k];
    const int32_t a = g.output_alias(k);
    const int64_t bytes = g.node(o).type.bytes();
    if (bytes == 0 || (a >= 0 && g.params()[static_cast<size_t>(a)] == o)) continue;
    const std::string dst =
        a >= 0 ? fmt::format("const_cast<void*>(in[{}])", a) : fmt::format("out[{}]", k);
    if (b.early_copy[k]) {
      sources.push_back(o);
      const int64_t t = b.early_temp[k];
      if (t < 0) {
        c.early += fmt::format("  __builtin_memcpy({}, v{}, {});  // output {} is %{}\n", dst, o,
                               bytes, k, o);
      } else {
        const int64_t off = b.arena_bytes + t;
        c.early += fmt::format("  __builtin_memcpy(A + {}, v{}, {});  // output {} is %{}\n", off,
                               o, bytes, k, o);
        c.late +=
            fmt::format("  __builtin_memcpy({}, A + {}, {});  // output {}\n", dst, off, bytes, k);
      }
    } else if (b.out_slot[o] != static_cast<int32_t>(k)) {
      sources.push_back(o);
      c.late += fmt::format("  __builtin_memcpy({}, v{}, {});  // output {} is %{}\n", dst, o,
                            bytes, k, o);
    }
  }
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  c.early = declare_buffers(g, b, sources) + c.early;
  return c;
}

}  // namespace keel::cpu::gen
