// The driver of CUDA C generation: where each value lives (an input, an output, the arena, or a
// constant array in the source), one kernel per unit in fusion-plan order, and the copies that
// fill outputs not computed in place.
#include "backend/cuda/codegen.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "backend/c_source/c_source.h"
#include "backend/c_source/units.h"
#include "backend/cuda/codegen_internal.h"
#include "backend/cuda/target.h"
#include "ir/text.h"

namespace keel::cuda {
namespace gen {

std::string Kernel::pointer(NodeId storage, bool written) {
  const Node& s = g_.node(storage);
  const NodeId stored = fusion_.storage_of(storage);
  if (g_.node(stored).op == Op::constant) {
    if (written) {
      fail("internal: {} is a constant, and a kernel stores into it",
           c_source::describe(g_, storage));
    }
    const int64_t at = fusion_.is_view(storage) ? fusion_.views[storage].offset : 0;
    return at == 0 ? fmt::format("{}c{}", places_.prefix, stored)
                   : fmt::format("({}c{} + {})", places_.prefix, stored, at);
  }
  auto it = params_.find(storage);
  if (it != params_.end()) {
    if (written && !written_[it->second]) {
      fail("internal: {} is read and written by one kernel", c_source::describe(g_, storage));
    }
    return fmt::format("a{}", it->second);
  }
  const std::optional<Slot> slot = slot_of(storage);
  if (!slot) {
    fail("internal: {} has no buffer, and kernel {} {} it", c_source::describe(g_, storage), name_,
         written ? "writes" : "reads");
  }
  const int index = static_cast<int>(launch_.args.size());
  params_[storage] = index;
  written_.push_back(written);
  launch_.args.push_back(*slot);
  const std::string type(c_source::storage_type(s.type.dtype));
  launch_.param_types.push_back(written ? type + "*" : "const " + type + "*");
  return fmt::format("a{}", index);
}

std::string Kernel::pointer_to(const Slot& slot, DType dtype, bool written) {
  const int index = static_cast<int>(launch_.args.size());
  written_.push_back(written);
  launch_.args.push_back(slot);
  const std::string type(c_source::storage_type(dtype));
  launch_.param_types.push_back(written ? type + "*" : "const " + type + "*");
  return fmt::format("a{}", index);
}

std::string Kernel::pointer_at(NodeId storage, int64_t elements) {
  const Node& s = g_.node(storage);
  if (s.op == Op::constant) {
    return elements == 0 ? fmt::format("{}c{}", places_.prefix, storage)
                         : fmt::format("({}c{} + {})", places_.prefix, storage, elements);
  }
  std::optional<Slot> slot = slot_of(storage);
  if (!slot) fail("internal: {} has no buffer", c_source::describe(g_, storage));
  slot->byte_offset += elements * static_cast<int64_t>(dtype_size(s.type.dtype));
  return pointer_to(*slot, s.type.dtype, false);
}

std::optional<Slot> Kernel::slot_of(NodeId storage) const {
  if (!fusion_.is_view(storage)) return places_.slot[storage];
  const passes::View& v = fusion_.views[storage];
  std::optional<Slot> base = places_.slot[v.base];
  if (!base) return std::nullopt;
  base->byte_offset += v.offset * dtype_size(g_.node(storage).type.dtype);
  return base;
}

// A minimum of one block per SM: without it ptxas aims at full occupancy and, near 32 registers,
// spills rather than use more (an attention kernel spilled 4 bytes at 32; 40 with it).
std::string Kernel::signature() const {
  std::string s = fmt::format("extern \"C\" __global__ void __launch_bounds__({}, 1) {}(",
                              launch_.block, name_);
  for (size_t i = 0; i < launch_.param_types.size(); ++i) {
    s += fmt::format("{}{} a{}", i ? ", " : "", launch_.param_types[i], i);
  }
  return s + ")";
}

std::string grid_stride(const std::string& counter, int64_t total) {
  return fmt::format(
      "  for (int64_t {0} = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; {0} < "
      "{1}LL;\n       {0} += static_cast<int64_t>(gridDim.x) * blockDim.x) {{\n",
      counter, total);
}

int64_t grid_for(int64_t work, int64_t per_block) {
  return std::clamp<int64_t>((work + per_block - 1) / per_block, 1, kMaxGrid);
}

}  // namespace gen

namespace {

using namespace gen;

bool identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// `text` with each local value t<node> renamed t<rank of its first appearance>: the same unit of
// another layer reads the same text.
std::string locals_renumbered(const std::string& text) {
  std::map<std::string, std::string> renamed;
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t j = i + 1;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    const bool local = text[i] == 't' && j > i + 1 && (i == 0 || !identifier_char(text[i - 1])) &&
                       (j == text.size() || !identifier_char(text[j]));
    if (!local) {
      out += text[i++];
      continue;
    }
    auto [it, fresh] = renamed.emplace(text.substr(i, j - i), "");
    if (fresh) it->second = fmt::format("t{}", renamed.size() - 1);
    out += it->second;
    i = j;
  }
  return out;
}

const passes::View* view_or_null(const passes::FusionPlan& f, NodeId id) {
  return f.is_view(id) ? &f.views[static_cast<size_t>(id)] : nullptr;
}

}  // namespace

namespace gen {

Launch add_kernel(Source& source, Kernel& k, std::string text) {
  text = locals_renumbered(text);
  auto [named, fresh] =
      source.kernel_named.emplace(text, fmt::format("k{}", source.kernel_named.size()));
  if (fresh) {
    const std::string call = fmt::format(" {}(", kKernelPlaceholder);
    source.kernels += text.replace(text.find(call), call.size(), " " + named->second + "(");
  }
  k.launch().kernel = named->second;
  return k.launch();
}

CudaProgram generate_part(const passes::Lowered& lowered, const GenerateOptions& options,
                          const std::string& prefix, Source& source) {
  const Graph& g = lowered.graph;
  const passes::Target& t = lowered.options.target;
  if (t.name != lowering_target().name || t.alignment != lowering_target().alignment ||
      t.scan_spare_carries != lowering_target().scan_spare_carries) {
    throw Error(fmt::format(
        "[backend.cuda] internal: graph '{}' was lowered for the target '{}'; lower it with "
        "cuda::lower",
        g.name(), t.name));
  }
  const std::vector<c_source::Unit> units = c_source::plan_units(g, lowered.fusion, t);
  // Past the planned arena: temps of donated outputs, then the operand copies for products
  // (one product at a time uses them).
  const int64_t temps_at = (lowered.memory.arena_bytes + 255) / 256 * 256;
  const Places places = place_values(g, lowered, units, temps_at, prefix);
  const int64_t scratch_at = (temps_at + places.temp_bytes + 255) / 256 * 256;
  CudaProgram out;
  out.graph_name = g.name();
  for (NodeId id : g.params()) out.inputs.push_back(g.node(id).type);
  for (NodeId id : g.outputs()) out.outputs.push_back(g.node(id).type);
  out.aliases = g.output_aliases();
  int64_t scratch_bytes = 0;
  out.predicted_peak_bytes = lowered.memory.predicted_peak_bytes;
  // Every constant as a device array: kernels read them by name.
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.nodes()[id];
    if (n.op != Op::constant || numel(n.type.shape) == 0) continue;
    source.defs += c_source::constant_array(n.attrs.array("value"),
                                            fmt::format("{}c{}", prefix, id), "__device__ const");
  }
  std::vector<int32_t> readers(g.size(), 0);
  for (const Node& n : g.nodes()) {
    for (NodeId in : n.inputs) ++readers[static_cast<size_t>(in)];
  }
  for (NodeId o : g.outputs()) ++readers[static_cast<size_t>(o)];
  // Products that apply GELU or its gradient, by their unit and by the loop they replace.
  std::map<size_t, gen::GeluEpilogue> gelu_by_product, gelu_by_loop;
  if (options.gelu_epilogues) {
    for (const gen::GeluEpilogue& e : gelu_epilogues(g, lowered.fusion, places, units)) {
      gelu_by_product[e.product_unit] = e;
      gelu_by_loop[e.loop_unit] = e;
    }
  }
  auto emit_product = [&](size_t unit, const ProductEpilogue* epilogue) {
    Emitted e;
    emit_dot(g, lowered.fusion, places, units[unit].root, scratch_at,
             fmt::format("{}d{}", prefix, unit), e, epilogue);
    source.kernels += e.kernels;
    for (Launch& l : e.launches) out.launches.push_back(std::move(l));
    scratch_bytes = std::max(scratch_bytes, e.scratch_bytes);
  };
  for (size_t i = 0; i < units.size(); ++i) {
    const c_source::Unit& u = units[i];
    // A GELU gradient's product runs where the loop it replaces was (it reads that loop's input).
    if (auto e = gelu_by_loop.find(i); e != gelu_by_loop.end()) {
      emit_product(e->second.product_unit, &e->second.epilogue);
      continue;
    }
    if (gelu_by_product.count(i)) continue;
    Kernel k(g, lowered.fusion, places, kKernelPlaceholder);
    std::string text;
    switch (u.kind) {
      case c_source::UnitKind::Loop:
        text = emit_loop(k, u);
        break;
      case c_source::UnitKind::Reduce:
        text = emit_reduce(k, u);
        break;
      case c_source::UnitKind::Kernel: {
        const Node& n = g.node(u.root);
        if (n.op == Op::dot_general && u.also.empty()) {
          std::optional<ProductEpilogue> sum;
          if (options.product_addends && i + 1 < units.size() && !gelu_by_loop.count(i + 1)) {
            sum = product_sum(g, lowered.fusion, places, u, units[i + 1], readers);
          }
          emit_product(i, sum ? &*sum : nullptr);
          if (sum) ++i;  // the add's unit: the product computes it
          continue;
        }
        if (op_info(n.op).kind == OpKind::Attention && u.also.empty()) {
          text = emit_attention(k, u.root, options.bf16_products);
          break;
        }
        if (op_info(n.op).kind == OpKind::SparseAttention && u.also.empty()) {
          text = emit_sparse_attention(k, u.root);
          break;
        }
        if (has_axis_kernel(n.op) && u.also.empty()) {
          text = emit_axis_kernel(k, u.root);
          break;
        }
        if (has_index_kernel(n.op) && u.also.empty()) {
          text = emit_index_kernel(k, u.root);
          break;
        }
        if (!passes::is_layout(n.op) || !u.also.empty()) {
          throw Error(fmt::format(
              "[backend.cuda] {} (from {}:{}) has no CUDA kernel yet (collectives across "
              "processes are still to come); train on launch.backend = cpu meanwhile",
              op_name(n.op), n.loc.file, n.loc.line));
        }
        text = emit_layout_copy(k, u.root, view_or_null(lowered.fusion, n.inputs[0]));
        break;
      }
      case c_source::UnitKind::Scan: {
        const auto body = lowered.bodies.find(u.root);
        if (body == lowered.bodies.end()) {
          fail(
              "internal: scan %{} of graph '{}' has no lowered body; lower the graph with "
              "cuda::lower",
              u.root, g.name());
        }
        const CudaProgram body_program =
            generate_part(*body->second, options, fmt::format("{}s{}_", prefix, i), source);
        Emitted e;
        emit_scan(lowered, places, u, body_program, body->second->memory.arena_bytes, scratch_at,
                  source, e);
        for (Launch& l : e.launches) out.launches.push_back(std::move(l));
        scratch_bytes = std::max(scratch_bytes, e.scratch_bytes);
        continue;
      }
    }
    if (k.launch().grid == 0) continue;
    out.launches.push_back(add_kernel(source, k, std::move(text)));
  }
  fill_outputs(lowered, places, source, out);
  out.arena_bytes = scratch_bytes > 0       ? scratch_at + scratch_bytes
                    : places.temp_bytes > 0 ? temps_at + places.temp_bytes
                                            : lowered.memory.arena_bytes;
  out.predicted_peak_bytes += out.arena_bytes - lowered.memory.arena_bytes;
  return out;
}

}  // namespace gen

CudaProgram generate_program(const passes::Lowered& lowered, const GenerateOptions& options) {
  gen::Source source;
  CudaProgram out = gen::generate_part(lowered, options, "", source);
  out.source = fmt::format("// Generated by keel for graph {}; do not edit.\n",
                           quoted_text(lowered.graph.name()));
  out.source += kPrelude;
  out.source += c_source::kIntegerHelpers;
  out.source += source.defs;
  out.source += source.kernels;
  return out;
}

}  // namespace keel::cuda
