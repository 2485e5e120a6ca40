// A product plus a bias whose sum's only use is GELU (tanh form), and the backward's product
// whose only use is GELU's gradient at that sum: cuBLASLt's GELU epilogues compute them, and the
// elementwise loops after the products are not generated (as XLA's GEMM rewriter folds GELU).
// The loops are recognised by what they compute: their values are evaluated as functions of the
// sum (and the product) at sample points, so any spelling autodiff or a model writes matches,
// and nothing else does.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "backend/c_source/c_source.h"
#include "backend/cuda/blas_product.h"
#include "backend/cuda/codegen_internal.h"
#include "ir/array.h"

namespace keel::cuda::gen {
namespace {

using Bound = std::map<NodeId, double>;

// The value of `id` as a function of the `bound` nodes alone, at their values: elementwise float
// ops over them and over constants of one element. nullopt when it depends on anything else.
std::optional<double> evaluate(const Graph& g, NodeId id, const Bound& bound, Bound& memo) {
  if (auto b = bound.find(id); b != bound.end()) return b->second;
  if (auto m = memo.find(id); m != memo.end()) return m->second;
  const Node& n = g.node(id);
  if (!is_float(n.type.dtype)) return std::nullopt;
  std::optional<double> v;
  if (n.op == Op::constant) {
    const Array& a = n.attrs.array("value");
    if (a.numel() == 1) v = a.get_f64(0);
  } else if (n.op == Op::broadcast || n.op == Op::reshape) {
    // Each element stays itself (reshape) or is repeated (broadcast). A bound value has the
    // product's shape, so a broadcast of it to more elements could only come back to that shape
    // through a reduction, which is refused.
    v = evaluate(g, n.inputs[0], bound, memo);
  } else if (op_info(n.op).kind == OpKind::Unary || op_info(n.op).kind == OpKind::Binary) {
    std::vector<double> in;
    for (NodeId x : n.inputs) {
      const std::optional<double> e = evaluate(g, x, bound, memo);
      if (!e) return std::nullopt;
      in.push_back(*e);
    }
    switch (n.op) {
      case Op::neg:
        v = -in[0];
        break;
      case Op::tanh:
        v = std::tanh(in[0]);
        break;
      case Op::exp:
        v = std::exp(in[0]);
        break;
      case Op::add:
        v = in[0] + in[1];
        break;
      case Op::sub:
        v = in[0] - in[1];
        break;
      case Op::mul:
        v = in[0] * in[1];
        break;
      case Op::div:
        v = in[0] / in[1];
        break;
      default:
        break;
    }
  }
  if (v) memo[id] = *v;
  return v;
}

// Sample points: where GELU is curved, and past its knees on both sides.
constexpr double kXs[] = {-3.7, -1.9, -0.85, -0.3, 0.2, 0.65, 1.4, 2.6};
constexpr double kYs[] = {1.3, -0.55};

bool near(double got, double want) {
  return std::isfinite(got) && std::abs(got - want) <= 1e-5 * std::max(1.0, std::abs(want));
}

// Whether `value` is GELU of `input` (gradient: `dy` times GELU's derivative at `input`).
bool is_gelu_of(const Graph& g, NodeId value, NodeId input, NodeId dy = -1) {
  for (double x : kXs) {
    for (double y : kYs) {
      Bound bound{{input, x}, {dy, y}}, memo;  // dy -1: no node is bound to y
      const std::optional<double> v = evaluate(g, value, bound, memo);
      const double want = dy >= 0 ? y * gelu_tanh_gradient(static_cast<float>(x))
                                  : gelu_tanh(static_cast<float>(x));
      if (!v || !near(*v, want)) return false;
    }
  }
  return true;
}

// Whether `id` is a function of `input` alone.
bool depends_only_on(const Graph& g, NodeId id, NodeId input) {
  Bound bound{{input, 0.5}}, memo;
  return evaluate(g, id, bound, memo).has_value();
}

bool scalar_constant(const Graph& g, NodeId id) {
  return g.node(id).op == Op::constant && numel(g.node(id).type.shape) == 1;
}

// A float product cuBLASLt can apply an epilogue to: one matrix of f32 results whose columns
// are a multiple of 8 (the GELU input's leading dimension), not an output of the program.
bool activation_product(const Graph& g, const passes::FusionPlan& f, const c_source::Unit& u,
                        const std::vector<bool>& is_output) {
  const Node& dot = g.node(u.root);
  if (dot.op != Op::dot_general || !u.also.empty() || dot.type.dtype != DType::f32 ||
      !is_float(g.node(dot.inputs[0]).type.dtype) || numel(dot.type.shape) == 0 ||
      !dot.attrs.ints("lhs_batch").empty() || dot.type.shape.back() % 8 != 0 || f.is_view(u.root) ||
      is_output[static_cast<size_t>(u.root)]) {
    return false;
  }
  int64_t k = 1;
  for (int64_t c : dot.attrs.ints("lhs_contract")) {
    k *= g.node(dot.inputs[0]).type.shape[static_cast<size_t>(c)];
  }
  return k > 0;
}

// Where a value of the product's type is stored, whole and 16-byte aligned, that a scan body's
// slices do not move; none otherwise.
std::optional<Extent> matrix_at(const Graph& g, const passes::FusionPlan& f, const Places& places,
                                NodeId x, NodeId dot) {
  if (g.node(x).type != g.node(dot).type || f.storage_of(x) != x || f.is_view(x)) {
    return std::nullopt;
  }
  const std::optional<Slot>& slot = places.slot[static_cast<size_t>(x)];
  if (!slot || slot->byte_offset % 16 != 0 ||
      (!places.prefix.empty() && slot->kind != Slot::Kind::arena)) {
    return std::nullopt;
  }
  return Extent{*slot, g.node(x).type.bytes()};
}

// The nodes unit `u` writes; nullopt for a unit whose writes are not listed (attention, scans,
// the rest of a shared call).
std::optional<std::vector<NodeId>> written_by(const Graph& g, const c_source::Unit& u) {
  switch (u.kind) {
    case c_source::UnitKind::Loop:
      return u.stores;
    case c_source::UnitKind::Reduce: {
      std::vector<NodeId> w = u.stores;
      w.push_back(u.root);
      return w;
    }
    case c_source::UnitKind::Kernel:
      if (g.node(u.root).op == Op::dot_general && u.also.empty()) {
        return std::vector<NodeId>{u.root};
      }
      return std::nullopt;
    case c_source::UnitKind::Scan:
      return std::nullopt;
  }
  return std::nullopt;
}

struct Context {
  const Graph& g;
  const passes::FusionPlan& f;
  const Places& places;
  const std::vector<c_source::Unit>& units;
  std::vector<std::vector<NodeId>> readers;  // per node, the nodes reading it
  std::vector<bool> is_output;
  std::vector<int32_t> computed_in;  // per node, the Loop unit computing it inline (-1: none)
};

// Whether every reader of `x` is computed inline by one of `units`.
bool read_only_in(const Context& c, NodeId x, const std::set<int32_t>& units) {
  if (c.is_output[static_cast<size_t>(x)]) return false;
  for (NodeId r : c.readers[static_cast<size_t>(x)]) {
    if (!units.count(c.computed_in[static_cast<size_t>(r)])) return false;
  }
  return true;
}

// The backward's product at unit `i`, read only by a later loop that stores one value: dy times
// GELU's derivative at a stored input (every other value it loads a function of that input).
std::optional<GeluEpilogue> gradient_at(const Context& c, size_t i) {
  const Graph& g = c.g;
  const NodeId d = c.units[i].root;
  const std::vector<NodeId>& rs = c.readers[static_cast<size_t>(d)];
  if (rs.empty()) return std::nullopt;
  const int32_t j = c.computed_in[static_cast<size_t>(rs.front())];
  if (j <= static_cast<int32_t>(i) || !read_only_in(c, d, {j})) return std::nullopt;
  const c_source::Unit& v = c.units[static_cast<size_t>(j)];
  if (v.stores.size() != 1) return std::nullopt;
  const NodeId s = v.stores[0];
  const std::optional<Extent> out = matrix_at(g, c.f, c.places, s, d);
  if (!out || !apart_from_operands(g, c.f, c.places, d, *out)) return std::nullopt;
  std::vector<NodeId> loaded;
  for (const c_source::Load& l : v.loads) {
    if (l.node != d && !scalar_constant(g, l.node)) loaded.push_back(l.node);
  }
  for (NodeId input : loaded) {
    bool others = true;
    for (NodeId x : loaded) others = others && (x == input || depends_only_on(g, x, input));
    if (!others || !is_gelu_of(g, s, input, d)) continue;
    const std::optional<Extent> in = matrix_at(g, c.f, c.places, input, d);
    if (!in || in->at.byte_offset % GemmCall::kAuxAlignment != 0 || overlap(*in, *out))
      return std::nullopt;
    // The product moves to the loop's place: the units between may not write what it reads.
    std::vector<Extent> read{*in};
    for (NodeId x : g.node(d).inputs) {
      if (std::optional<Extent> e = buffer_of(g, c.f, c.places, x)) read.push_back(*e);
    }
    for (size_t k = i + 1; k < static_cast<size_t>(j); ++k) {
      const std::optional<std::vector<NodeId>> written = written_by(g, c.units[k]);
      if (!written) return std::nullopt;
      for (NodeId w : *written) {
        const std::optional<Extent> e = buffer_of(g, c.f, c.places, w);
        if (!e) return std::nullopt;
        for (const Extent& r : read) {
          if (overlap(r, *e)) return std::nullopt;
        }
      }
    }
    GeluEpilogue out_epilogue;
    out_epilogue.product_unit = i;
    out_epilogue.loop_unit = static_cast<size_t>(j);
    out_epilogue.epilogue =
        ProductEpilogue{s, -1, GemmCall::Addend::none, GemmCall::Activation::gelu_gradient, input};
    return out_epilogue;
  }
  return std::nullopt;
}

// The forward's product at unit `i` plus a bias in the next loop, whose values are the sum, GELU
// of it, and values only `replaced` loops read, none of them a gradient epilogue's input
// (`aux_read`), which must stay written.
std::optional<GeluEpilogue> gelu_at(const Context& c, size_t i, const std::set<int32_t>& replaced,
                                    const std::set<NodeId>& aux_read) {
  const Graph& g = c.g;
  const NodeId d = c.units[i].root;
  if (i + 1 >= c.units.size() || c.units[i + 1].kind != c_source::UnitKind::Loop) {
    return std::nullopt;
  }
  const c_source::Unit& u = c.units[i + 1];
  const auto next = static_cast<int32_t>(i + 1);
  const std::vector<NodeId>& rs = c.readers[static_cast<size_t>(d)];
  if (rs.size() != 1 || !read_only_in(c, d, {next})) return std::nullopt;
  const NodeId sum = rs.front();
  const Node& add = g.node(sum);
  if (add.op != Op::add || add.type != g.node(d).type) return std::nullopt;
  const NodeId bias = add.inputs[0] == d ? add.inputs[1] : add.inputs[0];
  if (bias == d || !bias_fits(g, c.f, c.places, d, bias, add.type.shape)) return std::nullopt;
  for (const c_source::Load& l : u.loads) {
    if (l.node != d && l.node != bias && !scalar_constant(g, l.node)) return std::nullopt;
  }
  std::set<int32_t> readers_allowed = replaced;
  readers_allowed.insert(next);
  NodeId gelu = -1, aux = -1;
  for (NodeId s : u.stores) {
    if (s == sum) {
      aux = sum;
    } else if (gelu < 0 && is_gelu_of(g, s, sum)) {
      gelu = s;
    } else if (aux_read.count(s) || !depends_only_on(g, s, sum) ||
               !read_only_in(c, s, readers_allowed)) {
      return std::nullopt;  // a value some unit still reads
    }
  }
  if (gelu < 0) return std::nullopt;
  const std::optional<Extent> out = matrix_at(g, c.f, c.places, gelu, d);
  if (!out || !apart_from_operands(g, c.f, c.places, d, *out)) return std::nullopt;
  const std::optional<Extent> read_bias = buffer_of(g, c.f, c.places, bias);
  if (!read_bias || overlap(*read_bias, *out)) return std::nullopt;
  if (aux >= 0) {
    const std::optional<Extent> in = matrix_at(g, c.f, c.places, aux, d);
    if (!in || in->at.byte_offset % GemmCall::kAuxAlignment != 0 || overlap(*in, *out) ||
        overlap(*in, *read_bias) || !apart_from_operands(g, c.f, c.places, d, *in)) {
      return std::nullopt;
    }
  }
  GeluEpilogue e;
  e.product_unit = i;
  e.loop_unit = i + 1;
  e.epilogue =
      ProductEpilogue{gelu, bias, GemmCall::Addend::row_vector, GemmCall::Activation::gelu, aux};
  return e;
}

}  // namespace

std::vector<GeluEpilogue> gelu_epilogues(const Graph& g, const passes::FusionPlan& f,
                                         const Places& places,
                                         const std::vector<c_source::Unit>& units) {
  Context c{g, f, places, units, {}, {}, {}};
  c.readers.assign(g.size(), {});
  for (size_t id = 0; id < g.size(); ++id) {
    for (NodeId in : g.node(static_cast<NodeId>(id)).inputs) {
      c.readers[static_cast<size_t>(in)].push_back(static_cast<NodeId>(id));
    }
  }
  c.is_output.assign(g.size(), false);
  for (NodeId o : g.outputs()) c.is_output[static_cast<size_t>(o)] = true;
  c.computed_in.assign(g.size(), -1);
  for (size_t i = 0; i < units.size(); ++i) {
    if (units[i].kind != c_source::UnitKind::Loop) continue;
    for (NodeId x : units[i].compute)
      c.computed_in[static_cast<size_t>(x)] = static_cast<int32_t>(i);
  }
  std::vector<GeluEpilogue> out;
  std::set<int32_t> replaced;  // loops a gradient epilogue computes
  std::set<NodeId> aux_read;   // the values those epilogues read
  std::set<size_t> taken;      // units a found epilogue uses
  for (size_t i = 0; i < units.size(); ++i) {
    if (!activation_product(g, f, units[i], c.is_output)) continue;
    if (std::optional<GeluEpilogue> e = gradient_at(c, i); e && !taken.count(e->loop_unit)) {
      replaced.insert(static_cast<int32_t>(e->loop_unit));
      aux_read.insert(e->epilogue.aux);
      taken.insert({e->product_unit, e->loop_unit});
      out.push_back(*e);
    }
  }
  for (size_t i = 0; i < units.size(); ++i) {
    if (taken.count(i) || !activation_product(g, f, units[i], c.is_output)) continue;
    if (std::optional<GeluEpilogue> e = gelu_at(c, i, replaced, aux_read);
        e && !taken.count(e->loop_unit)) {
      taken.insert({e->product_unit, e->loop_unit});
      out.push_back(*e);
    }
  }
  return out;
}

}  // namespace keel::cuda::gen
