// Readable forms of the fusion and memory plans, as lower() writes them next to the graphs.
#include <fmt/format.h>

#include "ir/error.h"
#include "passes/pipeline.h"

namespace keel::passes {
namespace {

std::string id_list(const std::vector<NodeId>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += fmt::format("{}%{}", i ? "," : "", ids[i]);
  return s;
}

}  // namespace

std::string_view group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::Elementwise:
      return "elementwise";
    case GroupKind::Reduction:
      return "reduction";
    case GroupKind::Single:
      return "single";
  }
  return "unknown";
}

std::string print_fusion(const FusionPlan& fusion) {
  std::string out = fmt::format("{} groups\n", fusion.groups.size());
  for (size_t k = 0; k < fusion.groups.size(); ++k) {
    const FusionGroup& grp = fusion.groups[k];
    out += fmt::format("g{} {} nodes={} outputs={}\n", k, group_kind_name(grp.kind),
                       id_list(grp.nodes), id_list(grp.outputs));
  }
  return out;
}

std::string print_memory(const Graph& g, const MemoryPlan& memory, const LoweredBodies& bodies) {
  std::string out;
  size_t buffers = 0;
  for (size_t i = 0; i < memory.offset.size() && i < g.size(); ++i) {
    if (memory.offset[i] < 0) continue;
    const TensorType& t = g.nodes()[i].type;
    if (g.nodes()[i].op == Op::scan) {  // its buffer is the loop's workspace
      const auto body = bodies.find(static_cast<NodeId>(i));
      if (body == bodies.end()) {
        throw Error(fmt::format(
            "[passes] internal: print_memory was given no lowered body for scan %{} of graph "
            "'{}'; pass the Lowered's bodies",
            i, g.name()));
      }
      out += fmt::format("%{} offset={} bytes={} scan workspace\n", i, memory.offset[i],
                         scan_workspace_bytes(g.nodes()[i], *body->second));
      ++buffers;
      continue;
    }
    out += fmt::format("%{} offset={} bytes={} type={}\n", i, memory.offset[i], t.bytes(), t.str());
    ++buffers;
  }
  out += fmt::format(
      "buffers={} arena_bytes={} input_bytes={} output_bytes={} "
      "predicted_peak_bytes={}\n",
      buffers, memory.arena_bytes, memory.input_bytes, memory.output_bytes,
      memory.predicted_peak_bytes);
  return out;
}

}  // namespace keel::passes
