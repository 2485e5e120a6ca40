// VJP rule for dot_general. Each operand's cotangent is a dot_general of the output cotangent
// with the other operand, contracting the other operand's free dims, then a transpose back.
#include <algorithm>

#include "autodiff/vjp.h"

namespace keel::autodiff::detail {
namespace {

using Dims = std::vector<int64_t>;

// Dims of a rank-`rank` operand in neither `batch` nor `contract`, ascending (dot_general's order).
Dims free_dims(size_t rank, const Dims& batch, const Dims& contract) {
  Dims out;
  for (int64_t d = 0; d < int64_t(rank); ++d) {
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contract.begin(), contract.end(), d) == contract.end()) {
      out.push_back(d);
    }
  }
  return out;
}

bool is_identity(const Dims& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != int64_t(i)) return false;
  }
  return true;
}

// The permutation taking a product whose dims hold mine's dims `source[p]` back to mine's order.
Dims perm_from(const Dims& source, size_t my_rank) {
  Dims perm(my_rank);
  for (size_t p = 0; p < source.size(); ++p) perm[source[p]] = int64_t(p);
  return perm;
}

// Cotangent of operand "mine" given the other operand. g's dims are [batch, lhs free, rhs free];
// `g_mine`/`g_other` are the positions in g of mine's/other's free dims. The product g . other
// has dims [batch, mine's free, other's contracting dims in ascending order]; the last group maps
// to mine's contracting dims through the pairing, and a transpose restores mine's dim order.
// other . g has [batch, other's contracting dims, mine's free]: where that is already mine's
// order (a weight [in, out]'s gradient x^T g), it is the product, so no consumer (the optimizer
// update) reads the gradient through a transpose, a strided walk.
NodeId operand_ct(Builder& b, NodeId g, NodeId other, size_t my_rank, const Dims& my_batch,
                  const Dims& my_contract, const Dims& my_free, const Dims& other_batch,
                  const Dims& other_contract, const Dims& other_free, const Dims& g_other) {
  Dims g_batch(my_batch.size());
  for (size_t i = 0; i < g_batch.size(); ++i) g_batch[i] = int64_t(i);
  Dims order(other_contract.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  std::sort(order.begin(), order.end(),
            [&](int64_t x, int64_t y) { return other_contract[x] < other_contract[y]; });
  Dims contracted;  // mine's dims paired with other's contracting dims, in other's order
  for (int64_t i : order) contracted.push_back(my_contract[i]);
  Dims swapped = my_batch;
  swapped.insert(swapped.end(), contracted.begin(), contracted.end());
  swapped.insert(swapped.end(), my_free.begin(), my_free.end());
  Dims source = my_batch;
  source.insert(source.end(), my_free.begin(), my_free.end());
  source.insert(source.end(), contracted.begin(), contracted.end());
  const Dims perm = perm_from(source, my_rank);
  if (!is_identity(perm) && is_identity(perm_from(swapped, my_rank))) {
    return b.emit(Op::dot_general, {other, g},
                  {{"lhs_batch", other_batch},
                   {"rhs_batch", g_batch},
                   {"lhs_contract", other_free},
                   {"rhs_contract", g_other}});
  }
  NodeId prod = b.emit(Op::dot_general, {g, other},
                       {{"lhs_batch", g_batch},
                        {"rhs_batch", other_batch},
                        {"lhs_contract", g_other},
                        {"rhs_contract", other_free}});
  return b.transpose(prod, perm);
}

}  // namespace

std::vector<NodeId> vjp_contraction(Builder& b, const VjpArgs& a) {
  const Attrs& at = a.fwd.attrs;
  const Dims& lb = at.ints("lhs_batch");
  const Dims& rb = at.ints("rhs_batch");
  const Dims& lc = at.ints("lhs_contract");
  const Dims& rc = at.ints("rhs_contract");
  const size_t lrank = a.in[0].shape.size(), rrank = a.in[1].shape.size();
  const Dims lf = free_dims(lrank, lb, lc);
  const Dims rf = free_dims(rrank, rb, rc);
  // Positions of each operand's free dims within g.
  Dims g_lf, g_rf;
  for (size_t i = 0; i < lf.size(); ++i) g_lf.push_back(int64_t(lb.size() + i));
  for (size_t i = 0; i < rf.size(); ++i) g_rf.push_back(int64_t(lb.size() + lf.size() + i));
  NodeId lhs = a.fwd.inputs[0], rhs = a.fwd.inputs[1];
  // bf16 operands with an f32 result: the cotangents are f32 products (of the exactly widened
  // operands), each rounded once to its operand's bf16.
  const bool widened = a.in[0].dtype != a.fwd.type.dtype;
  if (widened) {
    lhs = b.cast(lhs, a.fwd.type.dtype);
    rhs = b.cast(rhs, a.fwd.type.dtype);
  }
  std::vector<NodeId> out(2, kNone);
  if (a.need[0]) out[0] = operand_ct(b, a.ct, rhs, lrank, lb, lc, lf, rb, rc, rf, g_rf);
  if (a.need[1]) out[1] = operand_ct(b, a.ct, lhs, rrank, rb, rc, rf, lb, lc, lf, g_lf);
  for (size_t i = 0; widened && i < 2; ++i) {
    if (out[i] != kNone) out[i] = b.cast(out[i], a.in[i].dtype);
  }
  return out;
}

}  // namespace keel::autodiff::detail
