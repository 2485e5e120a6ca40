#pragma once
// A seeded generator of random, verified f32 programs for the pass tests: elementwise chains,
// reductions, layout ops, contractions, plus the no-ops, duplicates and dead nodes that
// canonicalize, cse and dce exist to remove.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"

namespace keel::testing {

struct RandomProgram {
  Graph graph;
  std::vector<Array> inputs;  // one per parameter
};

class GraphGen {
 public:
  explicit GraphGen(uint64_t seed) : rng_(seed), g_("random" + std::to_string(seed)) {}

  RandomProgram make(int steps) {
    for (int i = 0, n = 2 + pick(3); i < n; ++i) pool_.push_back(param(random_shape()));
    for (int i = 0; i < steps; ++i) step();
    // Outputs: the last value, a few random ones, and some values nothing reads (the rest of
    // the unread values are dead code for dce).
    g_.add_output(pool_.back());
    for (int i = 0, n = pick(3); i < n; ++i) g_.add_output(any());
    std::vector<char> read(g_.size(), 0);
    for (const Node& n : g_.nodes()) {
      for (NodeId in : n.inputs) read[static_cast<size_t>(in)] = 1;
    }
    for (NodeId v : pool_) {
      if (!read[static_cast<size_t>(v)] && pick(3) == 0) g_.add_output(v);
    }
    RandomProgram p{g_, {}};
    for (NodeId id : g_.params()) {
      const TensorType& t = g_.node(id).type;
      Array a(t.dtype, t.shape);
      for (int64_t k = 0; k < a.numel(); ++k) a.set_f64(k, (pick(49) - 24) / 8.0);
      p.inputs.push_back(a);
    }
    return p;
  }

 private:
  using Ints = std::vector<int64_t>;

  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  bool coin() { return pick(2) == 0; }
  NodeId any() { return pool_[static_cast<size_t>(pick(static_cast<int>(pool_.size())))]; }
  const Shape& shape(NodeId id) const { return g_.node(id).type.shape; }
  SourceLoc loc() { return {"gen.cpp", static_cast<uint32_t>(++line_)}; }

  Shape random_shape() {
    Shape s(static_cast<size_t>(pick(4)));
    for (int64_t& d : s) d = 1 + pick(4);
    return s;
  }
  NodeId param(Shape s) { return g_.add_param({DType::f32, std::move(s)}, loc()); }
  NodeId emit(Op op, std::vector<NodeId> in, Attrs a = {}) {
    NodeId id = g_.emit(op, std::move(in), std::move(a), loc(), "gen");
    if (g_.node(id).type.dtype == DType::f32 && numel(shape(id)) <= 256) pool_.push_back(id);
    return id;
  }

  // A value whose shape broadcasts with `a`'s: often the same shape, else any compatible one.
  NodeId partner(NodeId a) {
    std::vector<NodeId> same, compatible;
    for (NodeId b : pool_) {
      if (shape(b) == shape(a)) same.push_back(b);
      if (broadcastable_to(shape(b), shape(a)) || broadcastable_to(shape(a), shape(b))) {
        compatible.push_back(b);
      }
    }
    const auto& from = (coin() || compatible.empty()) ? same : compatible;
    return from[static_cast<size_t>(pick(static_cast<int>(from.size())))];
  }

  NodeId unary(NodeId a) {
    static const Op ops[] = {Op::neg,     Op::abs, Op::exp,  Op::tanh,         Op::sin,
                             Op::sigmoid, Op::log, Op::sqrt, Op::stop_gradient};
    return emit(ops[pick(9)], {a});
  }
  NodeId binary(NodeId a, NodeId b) {
    static const Op ops[] = {Op::add, Op::sub, Op::mul, Op::div, Op::max, Op::min};
    return emit(ops[pick(6)], coin() ? std::vector<NodeId>{a, b} : std::vector<NodeId>{b, a});
  }
  NodeId scalar() {
    static const double values[] = {0.5, 2.0, -1.0, 0.0, -0.0};
    return g_.add_constant(Array::scalar(values[pick(5)]), loc());
  }

  void chain() {
    NodeId v = any();
    for (int i = 0, n = 2 + pick(5); i < n; ++i) {
      v = pick(3) == 0 ? unary(v) : binary(v, coin() ? partner(v) : scalar());
    }
  }

  void reduce() {
    static const Op ops[] = {Op::reduce_sum, Op::reduce_max, Op::reduce_mean};
    NodeId a = any();
    Ints axes;
    for (size_t d = 0; d < shape(a).size(); ++d) {
      if (coin()) axes.push_back(static_cast<int64_t>(d));
    }
    const int64_t keep = coin() ? 1 : 0;
    NodeId r = emit(ops[pick(3)], {a}, {{"axes", axes}, {"keepdims", keep}});
    if (keep && coin()) binary(a, r);  // the softmax / norm pattern
  }

  void layout() {
    NodeId a = any();
    const Shape s = shape(a);  // a copy: emitting may move the node it refers to
    const size_t rank = s.size();
    switch (pick(6)) {
      case 0: {
        Ints perm(rank);
        for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(i);
        std::shuffle(perm.begin(), perm.end(), rng_);
        emit(Op::transpose, {a}, {{"perm", perm}});
        break;
      }
      case 1: {
        Ints to(rank + 1, 1);  // s with a leading 1, or s flattened
        std::copy(s.begin(), s.end(), to.begin() + 1);
        if (coin()) to = {numel(s)};
        if (to.size() <= 4) emit(Op::reshape, {a}, {{"shape", to}});
        break;
      }
      case 2: {
        Ints to(s.begin(), s.end());
        for (int64_t& d : to) d = d == 1 && coin() ? 3 : d;
        if (coin() && rank < 4) to.insert(to.begin(), 2);
        emit(Op::broadcast, {a}, {{"shape", to}});
        break;
      }
      case 3: {
        Ints start(rank), limit(rank), stride(rank);
        for (size_t d = 0; d < rank; ++d) {
          start[d] = pick(static_cast<int>(s[d]));
          limit[d] = start[d] + 1 + pick(static_cast<int>(s[d] - start[d]));
          stride[d] = 1 + pick(2);
        }
        emit(Op::slice, {a}, {{"start", start}, {"limit", limit}, {"stride", stride}});
        break;
      }
      case 4:
        if (rank > 0) {
          emit(Op::concat, {a, partner_same(a)}, {{"axis", static_cast<int64_t>(pick(rank))}});
        }
        break;
      default: {
        Ints lo(rank), hi(rank);
        for (size_t d = 0; d < rank; ++d) lo[d] = pick(2), hi[d] = pick(2);
        emit(Op::pad, {a}, {{"low", lo}, {"high", hi}, {"value", coin() ? 0.0 : -1.5}});
      }
    }
  }
  NodeId partner_same(NodeId a) {
    for (int tries = 0; tries < 4; ++tries) {
      NodeId b = any();
      if (shape(b) == shape(a)) return b;
    }
    return a;
  }

  // Contracts `a`'s last axis with a matching axis of another value (or a fresh parameter).
  void matmul() {
    NodeId a = any();
    if (shape(a).empty()) return;
    const int64_t k = shape(a).back();
    NodeId b = -1;
    int64_t axis = 0;
    for (NodeId c : pool_) {
      for (size_t d = 0; d < shape(c).size() && b < 0; ++d) {
        if (shape(c)[d] == k && shape(c).size() + shape(a).size() <= 6 && coin()) {
          b = c, axis = static_cast<int64_t>(d);
        }
      }
    }
    if (b < 0) b = param({k, 1 + pick(4)});
    const int64_t last = static_cast<int64_t>(shape(a).size()) - 1;
    emit(Op::dot_general, {a, b},
         {{"lhs_batch", Ints{}},
          {"rhs_batch", Ints{}},
          {"lhs_contract", Ints{last}},
          {"rhs_contract", Ints{axis}}});
  }

  // Ops that canonicalize removes or folds.
  void noop() {
    NodeId a = any();
    const Shape s = shape(a);  // a copy: emitting may move the node it refers to
    const size_t rank = s.size();
    Ints ident(rank), zeros(rank, 0), ones(rank, 1);
    for (size_t i = 0; i < rank; ++i) ident[i] = static_cast<int64_t>(i);
    switch (pick(7)) {
      case 0:
        emit(Op::cast, {a}, {{"dtype", DType::f32}});
        break;
      case 1:
        emit(Op::reshape, {emit(Op::reshape, {a}, {{"shape", Ints{numel(s)}}})}, {{"shape", s}});
        break;
      case 2:
        emit(Op::transpose, {a}, {{"perm", ident}});
        break;
      case 3:
        emit(Op::broadcast, {a}, {{"shape", s}});
        break;
      case 4:
        emit(Op::slice, {a}, {{"start", zeros}, {"limit", s}, {"stride", ones}});
        break;
      case 5:
        if (rank > 0) emit(Op::concat, {a}, {{"axis", int64_t{0}}});
        break;
      default:
        emit(Op::pad, {a}, {{"low", zeros}, {"high", zeros}, {"value", 0.0}});
    }
  }

  // Re-emits an earlier computation (cse), or round-trips through another dtype.
  void duplicate_or_cast() {
    NodeId a = any();
    const Node n = g_.node(a);
    if (n.op != Op::parameter && coin()) {
      emit(n.op, n.inputs, n.attrs);
    } else if (n.op == Op::constant || coin()) {
      g_.add_constant(n.op == Op::constant ? n.attrs.array("value") : Array::scalar(0.5), loc());
    } else {
      const DType via = coin() ? DType::bf16 : DType::i32;
      emit(Op::cast, {emit(Op::cast, {a}, {{"dtype", via}})}, {{"dtype", DType::f32}});
    }
  }

  void select() {
    static const char* dirs[] = {"lt", "ge", "eq", "ne"};
    NodeId a = any(), b = partner(a);
    NodeId p = emit(Op::compare, {a, b}, {{"direction", std::string(dirs[pick(4)])}});
    emit(Op::select, {p, coin() ? a : b, coin() ? b : scalar()});
  }

  void step() {
    switch (pick(10)) {
      case 0:
        unary(any());
        break;
      case 1: {
        NodeId a = any();
        binary(a, partner(a));
        break;
      }
      case 2:
      case 3:
        chain();
        break;
      case 4:
        reduce();
        break;
      case 5:
        layout();
        break;
      case 6:
        matmul();
        break;
      case 7:
        noop();
        break;
      case 8:
        duplicate_or_cast();
        break;
      default:
        select();
    }
  }

  std::mt19937_64 rng_;
  Graph g_;
  std::vector<NodeId> pool_;  // f32 values to build on
  uint32_t line_ = 0;
};

inline RandomProgram random_program(uint64_t seed, int steps = 30) {
  return GraphGen(seed).make(steps);
}

}  // namespace keel::testing
