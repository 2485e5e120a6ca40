// A product whose only reader is an add in the next unit: cuBLASLt adds the add's other operand
// itself (a matrix as its C with beta = 1, a row vector as its bias epilogue) and stores into the
// add's buffer, so the elementwise pass that would read the product back and write the sum is
// not generated. XLA's GEMM rewriter folds the same adds.
#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen_internal.h"

namespace keel::cuda::gen {

bool overlap(const Extent& x, const Extent& y) {
  if (x.at.kind != y.at.kind || x.at.index != y.at.index || x.bytes == 0 || y.bytes == 0) {
    return false;
  }
  return x.at.byte_offset < y.at.byte_offset + y.bytes &&
         y.at.byte_offset < x.at.byte_offset + x.bytes;
}

std::optional<Extent> buffer_of(const Graph& g, const passes::FusionPlan& f, const Places& places,
                                NodeId x) {
  const NodeId storage = f.storage_of(x);
  const std::optional<Slot>& slot = places.slot[static_cast<size_t>(storage)];
  if (!slot) return std::nullopt;
  return Extent{*slot, g.node(storage).type.bytes()};
}

namespace {

// Whether `e`, read at every element of `shape` with numpy's trailing alignment, is a packed
// vector of shape.back() entries repeated for every row.
bool row_vector(const Graph& g, const passes::FusionPlan& f, NodeId e, const Shape& shape) {
  const Shape& es = g.node(e).type.shape;
  if (es.empty() || es.size() > shape.size() || shape.empty() || es.back() != shape.back()) {
    return false;
  }
  const std::vector<int64_t> strides =
      f.is_view(e) ? f.views[static_cast<size_t>(e)].strides : passes::row_major_strides(es);
  for (size_t d = 0; d + 1 < es.size(); ++d) {
    if (es[d] != 1 && strides[d] != 0) return false;
  }
  return es.back() == 1 || strides.back() == 1;
}

}  // namespace

bool bias_fits(const Graph& g, const passes::FusionPlan& f, const Places& places, NodeId dot,
               NodeId e, const Shape& shape) {
  const Node& n = g.node(dot);
  const std::vector<int64_t>&rb = n.attrs.ints("rhs_batch"), &rc = n.attrs.ints("rhs_contract");
  const size_t rhs_free = g.node(n.inputs[1]).type.shape.size() - rb.size() - rc.size();
  if (g.node(e).type.dtype != DType::f32 || !n.attrs.ints("lhs_batch").empty() || rhs_free != 1 ||
      !row_vector(g, f, e, shape) || !buffer_of(g, f, places, e)) {
    return false;
  }
  // cuBLASLt's bias must be 16-byte aligned (buffers are 256-byte aligned; views move it). A
  // scan body's inputs and outputs move by each iteration's slice offset: only its arena stays.
  Kernel probe(g, f, places, "");
  const std::optional<Slot> at = probe.slot_of(e);
  return at && at->byte_offset % 16 == 0 &&
         (places.prefix.empty() || at->kind == Slot::Kind::arena);
}

bool apart_from_operands(const Graph& g, const passes::FusionPlan& f, const Places& places,
                         NodeId dot, const Extent& written) {
  for (NodeId x : g.node(dot).inputs) {
    const std::optional<Extent> read = buffer_of(g, f, places, x);
    if (read && overlap(*read, written)) return false;
  }
  return true;
}

std::optional<ProductEpilogue> product_sum(const Graph& g, const passes::FusionPlan& f,
                                           const Places& places, const c_source::Unit& product,
                                           const c_source::Unit& next,
                                           const std::vector<int32_t>& readers) {
  const NodeId d = product.root;
  const Node& dot = g.node(d);
  if (dot.op != Op::dot_general || !product.also.empty() || dot.type.dtype != DType::f32 ||
      !is_float(g.node(dot.inputs[0]).type.dtype) || numel(dot.type.shape) == 0) {
    return std::nullopt;
  }
  const std::vector<int64_t>& lc = dot.attrs.ints("lhs_contract");
  int64_t k = 1;
  for (int64_t c : lc) k *= g.node(dot.inputs[0]).type.shape[static_cast<size_t>(c)];
  if (k == 0 || readers[static_cast<size_t>(d)] != 1 || f.is_view(d)) return std::nullopt;
  if (next.kind != c_source::UnitKind::Loop || next.compute.size() != 1 ||
      next.stores.size() != 1 || next.compute[0] != next.stores[0]) {
    return std::nullopt;
  }
  const NodeId sum = next.stores[0];
  const Node& add = g.node(sum);
  if (add.op != Op::add || add.type != dot.type || f.storage_of(sum) != sum) return std::nullopt;
  const size_t which = add.inputs[0] == d ? 0 : add.inputs[1] == d ? 1 : 2;
  if (which == 2) return std::nullopt;
  const NodeId e = add.inputs[1 - which];
  const std::optional<Slot>& sum_slot = places.slot[static_cast<size_t>(sum)];
  const std::optional<Extent> addend = buffer_of(g, f, places, e);
  if (!sum_slot || !addend) return std::nullopt;  // a constant addend has no device address
  ProductEpilogue out{sum, e, GemmCall::Addend::none};
  const Shape& shape = add.type.shape;
  if (g.node(e).type == add.type && (!f.is_view(e) || f.views[static_cast<size_t>(e)].contiguous)) {
    out.kind = GemmCall::Addend::matrix;
  } else if (bias_fits(g, f, places, d, e, shape)) {
    out.kind = GemmCall::Addend::row_vector;
  } else {
    return std::nullopt;
  }
  // The product writes the sum's bytes while it reads its operands: they may not share any
  // (the plan lets a buffer start where one the product last reads ends). cuBLASLt takes C in
  // place of D, nothing else.
  const Extent written{*sum_slot, add.type.bytes()};
  if (!apart_from_operands(g, f, places, d, written)) return std::nullopt;
  Kernel probe(g, f, places, "");
  const std::optional<Slot> addend_at = probe.slot_of(e);
  const bool in_place = out.kind == GemmCall::Addend::matrix && addend_at == *sum_slot;
  if (!addend_at || (!in_place && overlap(*addend, written))) return std::nullopt;
  return out;
}

}  // namespace keel::cuda::gen
