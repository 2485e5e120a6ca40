#pragma once
// The seeded random graph generator of backend_cpu_test: elementwise chains with broadcasting,
// reductions, matmul, layout ops and gather, grown from a pool of values of compatible shapes.
#include <algorithm>
#include <random>
#include <vector>

#include "tests/backend_cpu_program.h"

namespace keel::cpu_test {

// ---- seeded random graphs: elementwise chains with broadcasting, reductions, matmul, layout,
// gather; ten components per program so fifty graphs cost five compiles ----------------------

class RandomGraph {
 public:
  RandomGraph(TestProgram& p, std::mt19937_64& r) : p_(p), r_(r) {
    const int64_t sizes[] = {1, 3, 8, 33};
    b_ = sizes[pick(4)];
    n_ = sizes[pick(4)];
    pool_ = {p.random(DType::f32, {b_, n_}), p.random(DType::f32, {n_}),
             p.random(DType::f32, {b_, 1}), p.random(DType::f32, {})};
  }

  void grow(int steps) {
    for (int s = 0; s < steps; ++s) pool_.push_back(step());
  }
  std::vector<NodeId> results(size_t n) const {
    return {pool_.end() - static_cast<std::ptrdiff_t>(std::min(n, pool_.size() - 4)), pool_.end()};
  }

 private:
  size_t pick(size_t n) { return static_cast<size_t>(r_() % n); }
  NodeId any() { return pool_[pick(pool_.size())]; }
  const Shape& shape(NodeId id) const { return p_.g.node(id).type.shape; }
  NodeId any_of_rank(size_t rank) {
    std::vector<NodeId> c;
    for (NodeId id : pool_) {
      if (shape(id).size() == rank) c.push_back(id);
    }
    return c[pick(c.size())];  // the starting pool has ranks 0, 1 and 2
  }

  NodeId step() {
    switch (pick(8)) {
      case 0: {  // a bounded unary op
        const Op ops[] = {Op::tanh, Op::sigmoid, Op::sin, Op::cos, Op::neg, Op::abs};
        return p_.op(ops[pick(6)], {any()});
      }
      case 1:
      case 2: {  // a broadcasting binary op; multiplication squashed so values stay bounded
        NodeId a = any(), b = any();
        try {
          broadcast_shapes(shape(a), shape(b));
        } catch (const Error&) {
          b = p_.op(Op::reduce_sum, {b}, reduce_attrs(all_axes(b), 0));
        }
        const Op ops[] = {Op::add, Op::sub, Op::max, Op::min, Op::mul};
        const Op op = ops[pick(5)];
        NodeId y = p_.op(op, {a, b});
        return op == Op::mul ? p_.op(Op::tanh, {y}) : y;
      }
      case 3: {  // select on a comparison
        NodeId a = any_of_rank(2), b = any_of_rank(1);
        NodeId c = p_.op(Op::compare, {a, b}, {{"direction", std::string(pick(2) ? "lt" : "ge")}});
        return p_.op(Op::select, {c, a, b});
      }
      case 4: {  // a reduction kept as size 1, so it broadcasts back
        NodeId x = any_of_rank(2);
        const Op ops[] = {Op::reduce_sum, Op::reduce_max, Op::reduce_mean};
        return p_.op(ops[pick(3)], {x}, reduce_attrs({static_cast<int64_t>(pick(2))}, 1));
      }
      case 5: {  // matmul against a fresh weight, back to [b, n]
        NodeId x = any_of_rank(2);
        const Shape s = shape(x);
        NodeId w = p_.random(DType::f32, {s[1], n_}, -0.5, 0.5);
        return p_.op(Op::dot_general, {x, w},
                     {{"lhs_batch", Ints{}},
                      {"rhs_batch", Ints{}},
                      {"lhs_contract", Ints{1}},
                      {"rhs_contract", Ints{0}}});
      }
      case 6: {  // layout: transpose twice or reshape through one flat dim
        NodeId x = any_of_rank(2);
        const Shape s = shape(x);
        if (pick(2)) {
          NodeId t = p_.op(Op::exp, {p_.op(Op::transpose, {x}, {{"perm", Ints{1, 0}}})});
          return p_.op(Op::transpose, {t}, {{"perm", Ints{1, 0}}});
        }
        NodeId flat = p_.op(Op::reshape, {x}, {{"shape", Ints{s[0] * s[1]}}});
        return p_.op(Op::reshape, {p_.op(Op::cos, {flat})}, {{"shape", s}});
      }
      default: {  // gather rows with out-of-range indices, then back to [b, n] by a reduction
        NodeId x = any_of_rank(2);
        Ints idx(static_cast<size_t>(b_));
        for (int64_t& i : idx)
          i = static_cast<int64_t>(pick(static_cast<size_t>(shape(x)[0]) + 2)) - 1;
        return p_.op(Op::gather, {x, p_.ints(DType::i32, idx)}, {{"axis", int64_t{0}}});
      }
    }
  }
  Ints all_axes(NodeId x) const {
    Ints a(shape(x).size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int64_t>(i);
    return a;
  }

  TestProgram& p_;
  std::mt19937_64& r_;
  int64_t b_ = 1, n_ = 1;
  std::vector<NodeId> pool_;
};

}  // namespace keel::cpu_test
