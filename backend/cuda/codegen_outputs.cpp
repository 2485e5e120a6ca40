// Where values live and how outputs are filled. Donation (an output the graph writes into an
// input's memory, returned as that input): computed straight into the input's buffer when nothing
// reads the input afterwards, else into a temp copied at the end; an output whose value is a
// donated input is copied before anything overwrites it. Other outputs that are parameters,
// constants, views or repeats are filled after the launches.
#include "backend/cuda/codegen_internal.h"

namespace keel::cuda::gen {
namespace {

int64_t aligned(int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

Places place_values(const Graph& g, const passes::Lowered& lowered,
                    const std::vector<c_source::Unit>& units, int64_t temps_at,
                    std::string prefix) {
  Places p;
  p.prefix = std::move(prefix);
  p.slot.assign(g.size(), std::nullopt);
  p.output_of.assign(g.size(), -1);
  p.saved.assign(g.outputs().size(), std::nullopt);
  const auto& params = g.params();
  for (size_t i = 0; i < params.size(); ++i) {
    p.slot[params[i]] = Slot{Slot::Kind::input, static_cast<int32_t>(i), 0};
  }
  auto temp = [&](int64_t bytes) {
    const Slot s{Slot::Kind::arena, 0, temps_at + p.temp_bytes};
    p.temp_bytes += aligned(bytes);
    return s;
  };
  const auto& outs = g.outputs();
  for (size_t j = 0; j < outs.size(); ++j) {
    const NodeId o = outs[j];
    const Node& n = g.node(o);
    if (n.op == Op::parameter || n.op == Op::constant || lowered.fusion.is_view(o) || p.slot[o] ||
        lowered.memory.offset[o] >= 0) {
      continue;  // copied after the launches
    }
    const int32_t a = g.output_alias(j);
    if (a < 0) {
      p.slot[o] = Slot{Slot::Kind::output, static_cast<int32_t>(j), 0};
      p.output_of[o] = static_cast<int32_t>(j);
    } else if (c_source::computable_in_place(g, lowered.fusion, units, o,
                                             params[static_cast<size_t>(a)])) {
      p.slot[o] = Slot{Slot::Kind::input, a, 0};
      p.output_of[o] = static_cast<int32_t>(j);
    } else {
      p.slot[o] = temp(n.type.bytes());  // copied into the input after the launches
    }
  }
  for (size_t id = 0; id < g.size(); ++id) {
    if (!p.slot[id] && lowered.memory.offset[id] >= 0) {
      p.slot[id] = Slot{Slot::Kind::arena, 0, lowered.memory.offset[id]};
    }
  }
  // Inputs the program overwrites: donated to an output other than themselves.
  std::vector<char> overwritten(g.size(), 0);
  for (size_t j = 0; j < outs.size(); ++j) {
    const int32_t a = g.output_alias(j);
    if (a >= 0 && outs[j] != params[static_cast<size_t>(a)]) {
      overwritten[static_cast<size_t>(params[static_cast<size_t>(a)])] = 1;
    }
  }
  for (size_t j = 0; j < outs.size(); ++j) {
    const NodeId o = outs[j];
    const int32_t a = g.output_alias(j);
    const bool itself = a >= 0 && params[static_cast<size_t>(a)] == o;
    if (itself || !overwritten[static_cast<size_t>(lowered.fusion.storage_of(o))] ||
        g.node(o).type.bytes() == 0) {
      continue;
    }
    // Into the output when its memory is its own; a donated one's input may still be read.
    p.saved[j] =
        a < 0 ? Slot{Slot::Kind::output, static_cast<int32_t>(j), 0} : temp(g.node(o).type.bytes());
  }
  return p;
}

void fill_outputs(const passes::Lowered& lowered, const Places& places, Source& source,
                  CudaProgram& out) {
  const Graph& g = lowered.graph;
  const auto& outs = g.outputs();
  for (size_t j = 0; j < outs.size(); ++j) {
    const NodeId o = outs[j];
    const Node& n = g.node(o);
    const int64_t bytes = n.type.bytes();
    const int32_t a = g.output_alias(j);
    const Slot to{Slot::Kind::output, static_cast<int32_t>(j), 0};
    if (bytes == 0 || places.output_of[o] == static_cast<int32_t>(j) ||
        (a >= 0 && g.params()[static_cast<size_t>(a)] == o)) {
      continue;  // computed in place, or a donated input returned as itself
    }
    if (n.op == Op::constant) {
      Kernel k(g, lowered.fusion, places, fmt::format("{}k_out{}", places.prefix, j));
      source.kernels += emit_constant_copy(k, o, to);
      out.launches.push_back(k.launch());
      continue;
    }
    if (lowered.fusion.is_view(o) && !lowered.fusion.views[static_cast<size_t>(o)].contiguous) {
      throw Error(
          fmt::format("[backend.cuda] internal: output {} is a strided view; fold_layout "
                      "must not fold a program output that is not contiguous",
                      j));
    }
    Kernel probe(g, lowered.fusion, places, "");
    const std::optional<Slot> from = probe.slot_of(o);
    if (!from) {
      throw Error(fmt::format("[backend.cuda] internal: output {} ({}) has no buffer to copy from",
                              j, c_source::describe(g, o)));
    }
    if (const std::optional<Slot>& saved = places.saved[j]) {
      out.copies_before.push_back({*from, *saved, bytes});
      if (*saved != to) out.copies_after.push_back({*saved, to, bytes});
      continue;
    }
    out.copies_after.push_back({*from, to, bytes});
  }
}

}  // namespace keel::cuda::gen
