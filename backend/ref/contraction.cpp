// dot_general with XLA DotGeneral semantics: out dims = batch, lhs free, rhs free.
#include <algorithm>
#include <vector>

#include "backend/ref/indexing.h"
#include "backend/ref/kernels.h"

namespace keel::ref {
namespace {

// Dims of a rank-`rank` operand that are neither batch nor contracting, in increasing order.
std::vector<int64_t> free_dims(size_t rank, const std::vector<int64_t>& batch,
                               const std::vector<int64_t>& contract) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(rank); ++d) {
    bool used = std::find(batch.begin(), batch.end(), d) != batch.end() ||
                std::find(contract.begin(), contract.end(), d) != contract.end();
    if (!used) out.push_back(d);
  }
  return out;
}

}  // namespace

// For every output element, fix the batch and free coordinates of both operands, then sum the
// products over every contracting coordinate (double for floats, wrapping int64 for integers).
Array eval_dot(const Node& node, const Array& lhs, const Array& rhs) {
  const auto& lb = node.attrs.ints("lhs_batch");
  const auto& rb = node.attrs.ints("rhs_batch");
  const auto& lc = node.attrs.ints("lhs_contract");
  const auto& rc = node.attrs.ints("rhs_contract");
  const std::vector<int64_t> lf = free_dims(lhs.shape().size(), lb, lc);
  const std::vector<int64_t> rf = free_dims(rhs.shape().size(), rb, rc);
  Shape contract_shape;
  for (int64_t d : lc) contract_shape.push_back(lhs.shape()[d]);

  const bool fl = is_float(node.type.dtype);
  Array out(node.type.dtype, node.type.shape);
  Index li(lhs.shape().size()), ri(rhs.shape().size());
  for_each_index(out.shape(), [&](const Index& idx, int64_t o) {
    size_t pos = 0;
    for (size_t i = 0; i < lb.size(); ++i, ++pos) li[lb[i]] = ri[rb[i]] = idx[pos];
    for (int64_t d : lf) li[d] = idx[pos++];
    for (int64_t d : rf) ri[d] = idx[pos++];
    double facc = 0.0;
    int64_t iacc = 0;
    for_each_index(contract_shape, [&](const Index& c, int64_t) {
      for (size_t i = 0; i < lc.size(); ++i) li[lc[i]] = ri[rc[i]] = c[i];
      const int64_t l = flat_offset(li, lhs.shape()), r = flat_offset(ri, rhs.shape());
      if (fl) {
        facc += lhs.get_f64(l) * rhs.get_f64(r);
      } else {
        iacc = wrap_add(iacc, wrap_mul(lhs.get_i64(l), rhs.get_i64(r)));
      }
    });
    if (fl) {
      out.set_f64(o, facc);
    } else {
      out.set_i64(o, iacc);
    }
  });
  return out;
}

}  // namespace keel::ref
