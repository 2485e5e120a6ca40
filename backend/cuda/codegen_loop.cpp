// Elementwise kernels: one thread per element in a grid-stride loop, each access indexed
// through the loop nest's merged dims; and the copies (layout ops that did not fold, outputs
// from constants), which are loops of one load and one store.
#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/codegen_body.h"

namespace keel::cuda::gen {

// Index expressions of every access at flat position `counter` of `nest`.
std::vector<std::string> offsets_at(const c_source::Nest& nest, const std::string& counter,
                                    std::string& declarations, const std::string& indent) {
  std::vector<size_t> dims(nest.size.size());
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = d;
  const std::vector<std::string> split = c_source::split_index(nest, dims, counter);
  std::vector<std::string> idx;
  for (size_t d = 0; d < split.size(); ++d) {
    if (split.size() == 1) {
      idx.push_back(counter);
      continue;
    }
    idx.push_back(fmt::format("{}{}", counter, d));
    declarations += fmt::format("{}const int64_t {}{} = {};\n", indent, counter, d, split[d]);
  }
  std::vector<std::string> out;
  for (const auto& strides : nest.strides) out.push_back(c_source::offset_expr(strides, dims, idx));
  return out;
}

std::string loop_kernel(Kernel& k, int64_t total, const std::string& before,
                        const std::string& inside) {
  k.launch().grid = grid_for(total, kBlockThreads);
  return fmt::format("{} {{\n{}{}{}  }}\n}}\n\n", k.signature(), before, grid_stride("i", total),
                     inside);
}

std::string emit_loop(Kernel& k, const c_source::Unit& u) {
  const Graph& g = k.graph();
  const Shape& shape = g.node(u.root).type.shape;
  const int64_t total = numel(shape);
  k.launch().block = kBlockThreads;
  k.launch().what = fmt::format("loop storing {}", c_source::describe(g, u.root));
  if (total == 0 || u.stores.empty()) {
    k.launch().grid = 0;
    return "";
  }
  Body body(k, u);
  const c_source::Nest nest =
      c_source::build_nest(shape, std::vector<bool>(shape.size(), false), body.accesses());
  std::string inside;
  const std::vector<std::string> offset = offsets_at(nest, "i", inside, "    ");
  const std::string before = body.hoisted("  ");
  inside += body.compute(offset, "    ") + body.store(offset, "    ");
  return loop_kernel(k, total, before, inside);
}

std::string emit_layout_copy(Kernel& k, NodeId id, const passes::View* input_view) {
  const Graph& g = k.graph();
  const Node& n = g.node(id);
  const NodeId x = n.inputs[0];
  const Shape& x_shape = g.node(x).type.shape;
  const passes::View in =
      input_view ? *input_view : passes::View{x, 0, passes::row_major_strides(x_shape), true};
  k.launch().block = kBlockThreads;
  k.launch().what = fmt::format("copy of {}", c_source::describe(g, id));
  const int64_t total = numel(n.type.shape);
  if (total == 0) {
    k.launch().grid = 0;
    return "";
  }
  const std::optional<passes::View> v = passes::layout_view(n, x_shape, in);
  if (!v) fail("internal: {} makes no view of its input", c_source::describe(g, id));
  const c_source::Nest nest = c_source::build_nest(
      n.type.shape, std::vector<bool>(n.type.shape.size(), false),
      {c_source::Access{n.type.shape, v->strides}, c_source::Access{n.type.shape, {}}});
  const std::string src = k.pointer_at(v->base, v->offset);
  const std::string dst = k.pointer(id, true);
  std::string inside;
  const std::vector<std::string> offset = offsets_at(nest, "i", inside, "    ");
  inside += fmt::format("    {}[{}] = {}[{}];\n", dst, offset[1], src, offset[0]);
  return loop_kernel(k, total, "", inside);
}

std::string emit_constant_copy(Kernel& k, NodeId id, const Slot& to) {
  const Graph& g = k.graph();
  const TensorType& t = g.node(id).type;
  k.launch().block = kBlockThreads;
  k.launch().what = fmt::format("output from {}", c_source::describe(g, id));
  const std::string dst = k.pointer_to(to, t.dtype);
  return loop_kernel(k, numel(t.shape), "",
                     fmt::format("    {}[i] = {}[i];\n", dst, k.pointer_at(id, 0)));
}

}  // namespace keel::cuda::gen
