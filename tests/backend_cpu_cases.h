#pragma once
// Case builders for backend_cpu_test: one per op (every dtype it takes, broadcasting, empty and
// size-1 dims, special values) and one per differentiable op for the gradient test.
#include <functional>
#include <map>
#include <string>

#include "tests/backend_cpu_program.h"
#include "tests/scan_graphs.h"

namespace keel::cpu_test {

// ---- one builder per op: iterating all_ops() makes a new op without a cpu case fail ---------

inline const std::vector<DType> kFloats = {DType::f32, DType::bf16};
inline const std::vector<DType> kNumbers = {DType::f32, DType::bf16, DType::i32, DType::i64};
inline const std::vector<DType> kAll = {DType::f32, DType::bf16, DType::i32, DType::i64,
                                        DType::boolean};
inline const std::vector<double> kSpecial = {kNaN, kInf,  -kInf, -0.0, 0.0,
                                             -1.5, 1e-30, 7.25,  50,   -50};

// f32 gets every shape (broadcast, empty, scalar); the other dtypes one shape and the specials.
inline void unary(TestProgram& p, Op op, double lo, double hi) {
  const bool fl_only = op != Op::neg && op != Op::abs;
  for (DType t : fl_only ? kFloats : kNumbers) {
    const std::string n = fmt::format("{} {}", op_name(op), dtype_name(t));
    p.out(p.op(op, {p.random(t, {3, 37}, lo, hi)}), n + " [3,37]");
    if (is_float(t)) p.out(p.op(op, {p.values(t, kSpecial)}), n + " special values");
    if (t != DType::f32) continue;
    p.out(p.op(op, {p.random(t, {0, 4}, lo, hi)}), n + " [0,4]");
    p.out(p.op(op, {p.random(t, {}, lo, hi)}), n + " scalar");
  }
  const Ints extremes = {std::numeric_limits<int32_t>::min(), -3, 0, 5,
                         std::numeric_limits<int32_t>::max()};
  if (!fl_only) {
    p.out(p.op(op, {p.ints(DType::i32, extremes)}), fmt::format("{} i32 extremes", op_name(op)));
    p.out(p.op(op, {p.ints(DType::i64, {std::numeric_limits<int64_t>::min(), -3, 4})}),
          fmt::format("{} i64 extremes", op_name(op)));
  }
}

inline void binary(TestProgram& p, Op op) {
  const bool fl_only = op == Op::pow;
  const double lo = fl_only ? 0.1 : -3, hi = 3;
  for (DType t : fl_only ? kFloats : kNumbers) {
    const std::string n = fmt::format("{} {}", op_name(op), dtype_name(t));
    auto rhs = [&](Shape s) {  // integer divisors away from zero except where the case wants 0
      return op == Op::div && !is_float(t) ? p.random(t, std::move(s), 1, 9)
                                           : p.random(t, std::move(s), lo, hi);
    };
    p.out(p.op(op, {p.random(t, {4, 1, 3}, lo, hi), rhs({5, 1})}), n + " [4,1,3]x[5,1]");
    p.out(p.op(op, {p.random(t, {}, lo, hi), rhs({7})}), n + " scalar x [7]");
    if (t != DType::f32) continue;
    p.out(p.op(op, {p.random(t, {2, 300}, lo, hi), rhs({2, 300})}), n + " same shape");
    p.out(p.op(op, {p.random(t, {0, 3}, lo, hi), rhs({3})}), n + " [0,3]x[3]");
    p.out(p.op(op, {p.random(t, {1, 1}, lo, hi), rhs({1})}), n + " [1,1]x[1]");
  }
  if (fl_only) return;
  const std::vector<double> a = {kNaN, 1, -0.0, 0.0, 3, -kInf, 2},
                            b = {1, kNaN, 0.0, -0.0, 0, 5, kInf};
  for (DType t : kFloats) {
    p.out(p.op(op, {p.values(t, a), p.values(t, b)}),
          fmt::format("{} {} special", op_name(op), dtype_name(t)));
  }
  const int64_t i32min = std::numeric_limits<int32_t>::min(),
                i32max = std::numeric_limits<int32_t>::max();
  const int64_t i64min = std::numeric_limits<int64_t>::min(),
                i64max = std::numeric_limits<int64_t>::max();
  p.out(p.op(op, {p.ints(DType::i32, {i32min, i32max, -7, 7, 0, 9, i32max}),
                  p.ints(DType::i32, {-1, 1, 2, -2, 0, 0, i32max})}),
        fmt::format("{} i32 wrap and div by 0", op_name(op)));
  p.out(p.op(op, {p.ints(DType::i64, {i64min, i64max, -7, 7, 0, i64max}),
                  p.ints(DType::i64, {-1, 1, 2, -2, 0, i64max})}),
        fmt::format("{} i64 wrap and div by 0", op_name(op)));
}

inline void compare_cases(TestProgram& p) {
  for (const std::string dir : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    for (DType t : dir == "eq" || dir == "lt" ? kAll : std::vector<DType>{DType::f32, DType::i32}) {
      const Attrs at{{"direction", std::string(dir)}};
      p.out(p.op(Op::compare, {p.random(t, {6, 1}, -2, 2), p.random(t, {5}, -2, 2)}, at),
            fmt::format("compare {} {}", dir, dtype_name(t)));
    }
    p.out(p.op(Op::compare,
               {p.values(DType::f32, {kNaN, 1, -0.0, kInf}),
                p.values(DType::f32, {kNaN, kNaN, 0.0, kInf})},
               {{"direction", std::string(dir)}}),
          fmt::format("compare {} NaN/-0/inf", dir));
  }
}

inline void cast_cases(TestProgram& p) {
  // 1 + 2^-8 and 1 + 3 * 2^-8 are exact bf16 ties: round to even goes down, then up.
  const std::vector<double> f = {kNaN,          kInf,     -kInf,      -0.0,      0.5,
                                 -1.7,          3e9,      -3e9,       1e20,      255.9,
                                 -2147483648.0, 16777217, 1.00390625, 1.01171875};
  const int64_t i32min = std::numeric_limits<int32_t>::min(),
                i32max = std::numeric_limits<int32_t>::max();
  for (DType from : kAll) {
    NodeId x = is_float(from)       ? p.values(from, f)
               : from == DType::i32 ? p.ints(from, {i32min, -1, 0, 1, 7, i32max, 65537})
               : from == DType::i64
                   ? p.ints(from, {std::numeric_limits<int64_t>::min(), -1, 0, 5, (1LL << 40) + 1,
                                   std::numeric_limits<int64_t>::max(), 16777217})
                   : p.ints(from, {0, 1, 1, 0});
    for (DType to : kAll) {
      p.out(p.op(Op::cast, {x}, {{"dtype", to}}),
            fmt::format("cast {} -> {}", dtype_name(from), dtype_name(to)),
            Tol{0, 0});  // one rounding of the same value: exact
    }
  }
}

inline void reduce_cases(TestProgram& p, Op op) {
  // f32 takes every axis set on a shape whose dims merge in every way; the others a few.
  const std::vector<Ints> all_axes = {{}, {0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}};
  const std::vector<Ints> some_axes = {{1}, {0, 2}, {0, 1, 2}};
  for (DType t : kNumbers) {
    for (const Ints& ax : t == DType::f32 ? all_axes : some_axes) {
      const int64_t keep = ax.size() % 2;
      const std::string n =
          fmt::format("{} {} axes {} keep {}", op_name(op), dtype_name(t), shape_str(ax), keep);
      p.out(p.op(op, {p.random(t, {3, 4, 67}, -3, 3)}, reduce_attrs(ax, keep)), n);
      if (t == DType::f32)
        p.out(p.op(op, {p.random(t, {300, 2, 1}, -3, 3)}, reduce_attrs(ax, 1 - keep)),
              n + " [300,2,1]");
    }
    p.out(p.op(op, {p.random(t, {4, 0}, -3, 3)}, reduce_attrs({1}, 0)),
          fmt::format("{} {} empty", op_name(op), dtype_name(t)));
    p.out(p.op(op, {p.random(t, {0, 4}, -3, 3)}, reduce_attrs({1}, 1)),
          fmt::format("{} {} no outputs", op_name(op), dtype_name(t)));
  }
  p.out(p.op(op, {p.random(DType::f32, {256, 512}, -1, 1)}, reduce_attrs({0}, 0)),
        "large over rows", kLoose);
  p.out(p.op(op, {p.random(DType::f32, {256, 512}, -1, 1)}, reduce_attrs({1}, 1)),
        "large over columns", kLoose);
  p.out(p.op(op, {p.values(DType::f32, {1, kNaN, 3, -0.0})}, reduce_attrs({0}, 0)), "NaN");
  p.out(p.op(op, {p.values(DType::f32, {-0.0, 0.0, -0.0})}, reduce_attrs({0}, 0)), "signed zeros");
}

using Builder = std::function<void(TestProgram&)>;

// Scans: the tiny MLP body forward and reversed, L = 1 and 4; two carries of two dtypes, two
// xs, a const, a parameter passed through as a y.
inline void scan_cases(TestProgram& p) {
  for (int64_t L : {1, 4}) {
    for (bool reverse : {false, true}) {
      const std::string n = fmt::format("scan L={} reverse={}", L, reverse);
      std::vector<NodeId> r =
          scan_test::tiny_scan(p.g, p.random(DType::f32, {2, 3}), p.random(DType::f32, {L, 3, 3}),
                               p.random(DType::f32, {3}), reverse);
      p.out(r[0], n + " carry", kLoose);
      p.out(r[1], n + " ys", kLoose);
      std::vector<NodeId> q =
          scan_test::multi_scan(p.g, p.random(DType::f32, {4}),
                                p.op(Op::reshape, {p.ints(DType::i32, {7})}, {{"shape", Ints{}}}),
                                p.random(DType::f32, {L, 4}), p.random(DType::f32, {L, 2, 4}),
                                p.random(DType::f32, {4}), reverse);
      for (size_t k = 0; k < q.size(); ++k)
        p.out(q[k], fmt::format("{} multi result {}", n, k), kLoose);
    }
  }
}

inline std::map<std::string, Builder> op_cases() {
  std::map<std::string, Builder> m;
  m["scan"] = scan_cases;
  m["scan_result"] = [](TestProgram&) {};  // covered by scan's cases
  m["parameter"] = [](TestProgram& p) {
    for (DType t : kAll)
      p.out(p.random(t, {2, 3}), fmt::format("parameter {} as output", dtype_name(t)));
  };
  m["constant"] = [](TestProgram& p) {
    Array c = Array::from_f32({6}, std::vector<float>{NAN, INFINITY, -0.0f, 1e-45f, -3.5f, 0.1f});
    p.out(p.g.add_constant(c), "constant f32 as output");
    NodeId x = p.random(DType::f32, {2, 6});
    p.out(p.op(Op::mul, {x, p.g.add_constant(c)}), "constant f32 array in a loop");
    p.out(p.op(Op::add, {x, p.g.add_constant(Array::scalar(-0.0))}), "scalar -0 inlined");
    p.out(p.op(Op::max, {x, p.g.add_constant(Array::scalar(kNaN))}), "scalar NaN inlined");
    p.out(p.g.add_constant(Array::full({3}, 1.5, DType::bf16)), "constant bf16");
    Array i = Array::from_i64({2}, Ints{std::numeric_limits<int64_t>::min(), 7});
    p.out(p.op(Op::add, {p.random(DType::i64, {3, 2}), p.g.add_constant(i)}),
          "constant i64 extremes");
    p.out(p.op(Op::transpose, {p.g.add_constant(Array::full({2, 3}, 2, DType::i32))},
               {{"perm", Ints{1, 0}}}),
          "constant into a kernel");
  };
  m["iota"] = [](TestProgram& p) {
    for (DType t : {DType::f32, DType::bf16, DType::i32, DType::i64}) {
      p.out(p.op(Op::iota, {}, {{"shape", Ints{3, 300}}, {"dtype", t}, {"dim", int64_t{1}}}),
            "iota " + std::string(dtype_name(t)));
    }
  };
  m["rng_uniform"] = [](TestProgram& p) {
    NodeId seed = p.param(Array::from_i64({}, Ints{42})),
           ctr = p.param(Array::from_i64({}, Ints{-7}));
    for (DType t : kFloats) {
      p.out(p.op(Op::rng_uniform, {seed, ctr}, {{"shape", Ints{5, 77}}, {"dtype", t}}),
            "rng " + std::string(dtype_name(t)), Tol{0, 0});
    }
  };
  struct Range {
    Op op;
    double lo, hi;
  };
  for (Range r : {Range{Op::neg, -3, 3}, Range{Op::abs, -3, 3}, Range{Op::exp, -5, 5},
                  Range{Op::log, 0.01, 9}, Range{Op::tanh, -4, 4}, Range{Op::sqrt, 0, 9},
                  Range{Op::rsqrt, 0.01, 9}, Range{Op::sigmoid, -9, 9}, Range{Op::erf, -3, 3},
                  Range{Op::sin, -6, 6}, Range{Op::cos, -6, 6}}) {
    m[std::string(op_name(r.op))] = [r](TestProgram& p) { unary(p, r.op, r.lo, r.hi); };
  }
  m["stop_gradient"] = [](TestProgram& p) {
    for (DType t : kAll)
      p.out(p.op(Op::stop_gradient, {p.random(t, {4, 5})}),
            "stop_gradient " + std::string(dtype_name(t)));
  };
  for (Op op : {Op::add, Op::sub, Op::mul, Op::div, Op::max, Op::min, Op::pow}) {
    m[std::string(op_name(op))] = [op](TestProgram& p) { binary(p, op); };
  }
  m["compare"] = compare_cases;
  m["select"] = [](TestProgram& p) {
    for (DType t : kAll) {
      p.out(p.op(Op::select,
                 {p.random(DType::boolean, {4, 1}), p.random(t, {3}), p.random(t, {1, 3})}),
            "select " + std::string(dtype_name(t)));
    }
  };
  m["cast"] = cast_cases;
  m["reshape"] = [](TestProgram& p) {
    for (DType t : kAll)
      p.out(p.op(Op::reshape, {p.random(t, {4, 6})}, {{"shape", Ints{2, 12, 1}}}),
            "reshape " + std::string(dtype_name(t)));
    p.out(p.op(Op::reshape, {p.random(DType::f32, {0, 3})}, {{"shape", Ints{3, 0}}}),
          "reshape empty");
  };
  m["transpose"] = [](TestProgram& p) {
    for (DType t : kAll) {
      p.out(p.op(Op::transpose, {p.random(t, {2, 3, 40})}, {{"perm", Ints{2, 0, 1}}}),
            "transpose " + std::string(dtype_name(t)));
    }
  };
  m["broadcast"] = [](TestProgram& p) {
    for (DType t : kAll)
      p.out(p.op(Op::broadcast, {p.random(t, {3, 1})}, {{"shape", Ints{2, 3, 5}}}),
            "broadcast " + std::string(dtype_name(t)));
  };
  m["slice"] = [](TestProgram& p) {
    for (DType t : kAll) {
      p.out(p.op(Op::slice, {p.random(t, {7, 9})},
                 {{"start", Ints{1, 0}}, {"limit", Ints{7, 9}}, {"stride", Ints{2, 3}}}),
            "slice " + std::string(dtype_name(t)));
    }
  };
  m["concat"] = [](TestProgram& p) {
    for (DType t : kAll) {
      p.out(p.op(Op::concat, {p.random(t, {2, 3}), p.random(t, {2, 0}), p.random(t, {2, 4})},
                 {{"axis", int64_t{1}}}),
            "concat " + std::string(dtype_name(t)));
    }
  };
  m["pad"] = [](TestProgram& p) {
    for (DType t : kAll) {
      p.out(p.op(Op::pad, {p.random(t, {2, 3})},
                 {{"low", Ints{1, 0}}, {"high", Ints{0, 2}}, {"value", -1.5}}),
            "pad " + std::string(dtype_name(t)));
    }
  };
  m["gather"] = [](TestProgram& p) {
    for (DType it : {DType::i32, DType::i64}) {
      NodeId idx = p.ints(it, {0, 4, -3, 99, 2});
      p.out(p.op(Op::gather, {p.random(DType::f32, {5, 3}), idx}, {{"axis", int64_t{0}}}),
            "gather axis 0 clamped");
      p.out(p.op(Op::gather, {p.random(DType::bf16, {2, 5}), idx}, {{"axis", int64_t{1}}}),
            "gather axis 1 bf16");
      p.out(p.op(Op::gather, {p.random(DType::i64, {5}), idx}, {{"axis", int64_t{0}}}),
            "gather i64");
    }
  };
  m["scatter_add"] = [](TestProgram& p) {
    NodeId idx = p.ints(DType::i64, {1, 1, 0, 7, -2});
    p.out(p.op(Op::scatter_add, {p.random(DType::f32, {4, 3}), idx, p.random(DType::f32, {5, 3})},
               {{"axis", int64_t{0}}}),
          "scatter_add f32 repeated");
    p.out(p.op(Op::scatter_add, {p.random(DType::i32, {2, 4}), idx, p.random(DType::i32, {2, 5})},
               {{"axis", int64_t{1}}}),
          "scatter_add i32 axis 1");
  };
  m["one_hot"] = [](TestProgram& p) {
    for (DType t : {DType::f32, DType::i32, DType::boolean}) {
      p.out(p.op(Op::one_hot, {p.ints(DType::i64, {0, 3, -1, 5, 2})},
                 {{"depth", int64_t{4}}, {"dtype", t}}),
            "one_hot " + std::string(dtype_name(t)));
    }
  };
  for (Op op : {Op::reduce_sum, Op::reduce_max, Op::reduce_mean}) {
    m[std::string(op_name(op))] = [op](TestProgram& p) { reduce_cases(p, op); };
  }
  m["argmax"] = [](TestProgram& p) {
    for (DType t : kNumbers) {
      p.out(p.op(Op::argmax, {p.random(t, {4, 6}, -2, 2)},
                 {{"axis", int64_t{1}}, {"keepdims", int64_t{0}}}),
            "argmax");
      p.out(p.op(Op::argmax, {p.random(t, {4, 6}, -2, 2)},
                 {{"axis", int64_t{0}}, {"keepdims", int64_t{1}}}),
            "argmax keep");
    }
    p.out(p.op(Op::argmax, {p.values(DType::f32, {1, 3, kNaN, 3, kNaN})},
               {{"axis", int64_t{0}}, {"keepdims", int64_t{0}}}),
          "argmax NaN");
  };
  m["cumsum"] = [](TestProgram& p) {
    for (DType t : kNumbers) {
      for (int64_t rev : {0, 1}) {
        p.out(p.op(Op::cumsum, {p.random(t, {3, 50}, -3, 3)},
                   {{"axis", int64_t{1}}, {"reverse", rev}}),
              "cumsum");
        p.out(p.op(Op::cumsum, {p.random(t, {3, 5}, -3, 3)},
                   {{"axis", int64_t{0}}, {"reverse", rev}}),
              "cumsum axis 0");
      }
    }
  };
  // Collectives over one process here; dist_mpi_test runs them across 2 and 4 ranks.
  for (Op op : {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::all_to_all, Op::axis_index,
                Op::pvary}) {
    m[std::string(op_name(op))] = [op](TestProgram& p) {
      Attrs a{{"axis", std::string("data")}, {"axis_size", int64_t{1}}};
      if (op == Op::pvary) {  // over 2 processes: a type, the values x's on one
        a.set("axis_size", int64_t{2});
        for (DType t : {DType::f32, DType::bf16, DType::i32}) {
          p.out(p.op(op, {p.random(t, {3, 4}, -2, 2)}, a), "pvary");
        }
        return;
      }
      a.set(op == Op::all_reduce ? "reduce" : "dim",
            op == Op::all_reduce ? AttrValue(std::string("min")) : AttrValue(int64_t{1}));
      if (op == Op::axis_index) return p.out(p.op(op, {}, a), "axis_index");
      for (DType t : {DType::f32, DType::bf16}) {
        p.out(p.op(op, {p.random(t, {3, 4}, -2, 2)}, a), std::string(op_name(op)));
      }
    };
  }
  for (Op op : {Op::top_k_values, Op::top_k_indices}) {
    m[std::string(op_name(op))] = [op](TestProgram& p) {
      for (DType t : kNumbers)
        p.out(p.op(op, {p.random(t, {3, 9}, -2, 2)}, {{"k", int64_t{4}}}),
              std::string(op_name(op)));
      p.out(p.op(op, {p.values(DType::f32, {2, kNaN, 2, 5, -1})}, {{"k", int64_t{3}}}),
            "top_k ties and NaN");
    };
  }
  m["dot_general"] = [](TestProgram& p) {
    auto dot = [&](NodeId a, NodeId b, Ints lb, Ints rb, Ints lc, Ints rc) {
      return p.op(
          Op::dot_general, {a, b},
          {{"lhs_batch", lb}, {"rhs_batch", rb}, {"lhs_contract", lc}, {"rhs_contract", rc}});
    };
    p.out(dot(p.random(DType::f32, {33, 70}), p.random(DType::f32, {70, 19}), {}, {}, {1}, {0}),
          "matmul", kLoose);
    p.out(dot(p.random(DType::f32, {2, 5, 7}), p.random(DType::f32, {2, 6, 7}), {0}, {0}, {2}, {2}),
          "batched, rhs transposed", kLoose);
    p.out(dot(p.random(DType::f32, {7, 3}), p.random(DType::f32, {7, 4}), {}, {}, {0}, {0}),
          "lhs transposed", kLoose);
    p.out(dot(p.random(DType::bf16, {4, 8}), p.random(DType::bf16, {8, 3}), {}, {}, {1}, {0}),
          "bf16", kBF16);
    p.out(dot(p.random(DType::i32, {4, 8}, -9, 9), p.random(DType::i32, {8, 3}, -9, 9), {}, {}, {1},
              {0}),
          "i32");
    p.out(dot(p.random(DType::i64, {3, 2}), p.random(DType::i64, {2}), {}, {}, {1}, {0}),
          "i64 matvec");
    p.out(dot(p.random(DType::f32, {3, 0}), p.random(DType::f32, {0, 2}), {}, {}, {1}, {0}),
          "empty contraction");
  };
  // Fused attention: 4 query heads over 2 kv heads, T = 70 (past one 64-row tile), documents of
  // lengths 3, 1 and 66; the gradient ops on arbitrary out, dout and lse.
  auto attention_in = [](TestProgram& p) {
    Ints doc;
    for (int64_t i = 0; i < 140; ++i) doc.push_back(i % 70 < 3 ? 0 : i % 70 < 4 ? 1 : 2);
    return std::vector<NodeId>{
        p.random(DType::f32, {2, 4, 70, 8}, -1, 1), p.random(DType::f32, {2, 2, 70, 8}, -1, 1),
        p.random(DType::f32, {2, 2, 70, 8}, -1, 1),
        p.op(Op::reshape, {p.ints(DType::i64, doc)}, {{"shape", Ints{2, 70}}})};
  };
  const Attrs scale{{"scale", 0.35}};
  m["attention"] = [=](TestProgram& p) {
    const std::vector<NodeId> in = attention_in(p);
    p.out(p.op(Op::attention, in, scale), "attention, documents", kLoose);
    p.out(p.op(Op::attention, {in[0], in[1], in[2]}, scale), "attention, causal", kLoose);
  };
  m["attention_lse"] = [=](TestProgram& p) {
    const std::vector<NodeId> in = attention_in(p);
    p.out(p.op(Op::attention_lse, {in[0], in[1], in[3]}, scale), "attention_lse", kLoose);
  };
  for (Op op : {Op::attention_dq, Op::attention_dk, Op::attention_dv}) {
    m[std::string(op_name(op))] = [=](TestProgram& p) {
      const std::vector<NodeId> in = attention_in(p);
      NodeId out = p.random(DType::f32, {2, 4, 70, 8}, -1, 1);
      NodeId dout = p.random(DType::f32, {2, 4, 70, 8}, -1, 1);
      NodeId lse = p.random(DType::f32, {2, 4, 70}, 1, 3);
      p.out(p.op(op, {in[0], in[1], in[2], out, dout, lse, in[3]}, scale), std::string(op_name(op)),
            kLoose);
    };
  }
  // Attention over listed keys: 4 query heads over 2 kv heads, T = 70, 12 entries a query, among
  // them positions before 0 and past T (nothing), one listed twice, and a query listing nothing;
  // and as wide: 2 query heads on 2 kv heads of 40 (a row over two registers a lane on CUDA).
  auto sparse_in = [](TestProgram& p, DType key_type, bool wide) {
    Ints keys;
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t t = 0; t < 70; ++t) {
        for (int64_t s = 0; s < 12; ++s) {
          keys.push_back(b == 0 && t == 5 ? -1 : s == 11 ? t : (t * 7 + s * 13 + b * 5) % 75 - 2);
        }
      }
    }
    const int64_t H = wide ? 2 : 4, D = wide ? 40 : 8;
    return std::vector<NodeId>{
        p.random(DType::f32, {2, 70, H, D}, -1, 1), p.random(DType::f32, {2, 70, 2, D}, -1, 1),
        p.random(DType::f32, {2, 70, 2, D}, -1, 1), p.random(DType::f32, {2, 70, H, D}, -1, 1),
        p.op(Op::reshape, {p.ints(key_type, keys)}, {{"shape", Ints{2, 70, 12}}})};
  };
  m["sparse_attention"] = [=](TestProgram& p) {
    const std::vector<NodeId> in = sparse_in(p, DType::i64, false);
    p.out(p.op(Op::sparse_attention, {in[0], in[1], in[2], in[4]}, scale), "sparse_attention",
          kLoose);
    const std::vector<NodeId> in32 = sparse_in(p, DType::i32, false);
    p.out(p.op(Op::sparse_attention, {in32[0], in32[1], in32[2], in32[4]}, scale),
          "sparse_attention, i32 keys", kLoose);
    const std::vector<NodeId> wide = sparse_in(p, DType::i64, true);
    p.out(p.op(Op::sparse_attention, {wide[0], wide[1], wide[2], wide[4]}, scale),
          "sparse_attention, wide heads", kLoose);
  };
  m["sparse_attention_weights"] = [=](TestProgram& p) {
    const std::vector<NodeId> in = sparse_in(p, DType::i32, false);
    p.out(p.op(Op::sparse_attention_weights, {in[0], in[1], in[4]}, scale),
          "sparse_attention_weights", kLoose);
    const std::vector<NodeId> wide = sparse_in(p, DType::i64, true);
    p.out(p.op(Op::sparse_attention_weights, {wide[0], wide[1], wide[4]}, scale),
          "sparse_attention_weights, wide heads", kLoose);
  };
  for (Op op : {Op::sparse_attention_dq, Op::sparse_attention_dk, Op::sparse_attention_dv}) {
    m[std::string(op_name(op))] = [=](TestProgram& p) {
      const std::vector<NodeId> in = sparse_in(p, DType::i64, false);
      p.out(p.op(op, in, scale), std::string(op_name(op)), kLoose);
      const std::vector<NodeId> wide = sparse_in(p, DType::i32, true);
      p.out(p.op(op, wide, scale), std::string(op_name(op)) + ", wide heads", kLoose);
    };
  }
  return m;
}

// ---- fused patterns: the loops fusion makes, at sizes that take the parallel paths ----------

inline NodeId keep_reduce(TestProgram& p, Op op, NodeId x, int64_t axis) {
  return p.op(op, {x}, reduce_attrs({axis}, 1));
}

inline NodeId softmax(TestProgram& p, NodeId x, int64_t axis) {
  NodeId e = p.op(Op::exp, {p.op(Op::sub, {x, keep_reduce(p, Op::reduce_max, x, axis)})});
  return p.op(Op::div, {e, keep_reduce(p, Op::reduce_sum, e, axis)});
}

// ---- gradients: f = sum(op(x) * w) for every differentiable op, one program ----------------

using GradCase = std::function<NodeId(TestProgram&)>;  // returns op(x) for random x

inline std::map<std::string, GradCase> grad_cases() {
  std::map<std::string, GradCase> m;
  auto f = [](TestProgram& p, Shape s, double lo = -2, double hi = 2) {
    return p.random(DType::f32, std::move(s), lo, hi);
  };
  for (Op op : {Op::neg, Op::abs, Op::exp, Op::tanh, Op::sigmoid, Op::erf, Op::sin, Op::cos}) {
    m[std::string(op_name(op))] = [=](TestProgram& p) { return p.op(op, {f(p, {3, 5})}); };
  }
  for (Op op : {Op::log, Op::sqrt, Op::rsqrt}) {
    m[std::string(op_name(op))] = [=](TestProgram& p) { return p.op(op, {f(p, {3, 5}, 0.2, 3)}); };
  }
  for (Op op : {Op::add, Op::sub, Op::mul, Op::max, Op::min}) {
    m[std::string(op_name(op))] = [=](TestProgram& p) {
      return p.op(op, {f(p, {3, 5}), f(p, {5})});
    };
  }
  m["div"] = [=](TestProgram& p) { return p.op(Op::div, {f(p, {3, 5}), f(p, {3, 1}, 0.5, 2)}); };
  m["pow"] = [=](TestProgram& p) {
    return p.op(Op::pow, {f(p, {3, 5}, 0.5, 2), f(p, {5}, -1, 2)});
  };
  m["select"] = [=](TestProgram& p) {
    return p.op(Op::select, {p.random(DType::boolean, {3, 1}), f(p, {3, 5}), f(p, {5})});
  };
  m["cast"] = [=](TestProgram& p) {
    NodeId h = p.op(Op::cast, {f(p, {4})}, {{"dtype", DType::bf16}});
    return p.op(Op::cast, {p.op(Op::mul, {h, h})}, {{"dtype", DType::f32}});
  };
  m["reshape"] = [=](TestProgram& p) {
    return p.op(Op::reshape, {f(p, {2, 6})}, {{"shape", Ints{3, 4}}});
  };
  m["transpose"] = [=](TestProgram& p) {
    return p.op(Op::transpose, {f(p, {2, 3, 4})}, {{"perm", Ints{1, 2, 0}}});
  };
  m["broadcast"] = [=](TestProgram& p) {
    return p.op(Op::broadcast, {f(p, {3, 1})}, {{"shape", Ints{2, 3, 4}}});
  };
  m["slice"] = [=](TestProgram& p) {
    return p.op(Op::slice, {f(p, {6, 5})},
                {{"start", Ints{1, 0}}, {"limit", Ints{6, 5}}, {"stride", Ints{2, 2}}});
  };
  m["concat"] = [=](TestProgram& p) {
    return p.op(Op::concat, {f(p, {2, 3}), f(p, {2, 2})}, {{"axis", int64_t{1}}});
  };
  m["pad"] = [=](TestProgram& p) {
    return p.op(Op::pad, {f(p, {2, 3})},
                {{"low", Ints{1, 0}}, {"high", Ints{0, 2}}, {"value", 0.5}});
  };
  m["gather"] = [=](TestProgram& p) {
    return p.op(Op::gather, {f(p, {5, 3}), p.ints(DType::i32, {4, 0, 4, 2})},
                {{"axis", int64_t{0}}});
  };
  m["scatter_add"] = [=](TestProgram& p) {
    return p.op(Op::scatter_add, {f(p, {4, 3}), p.ints(DType::i64, {1, 1, 3}), f(p, {3, 3})},
                {{"axis", int64_t{0}}});
  };
  for (Op op : {Op::reduce_sum, Op::reduce_max, Op::reduce_mean}) {
    m[std::string(op_name(op))] = [=](TestProgram& p) {
      return p.op(op, {f(p, {3, 4, 5})}, reduce_attrs({0, 2}, 0));
    };
  }
  m["cumsum"] = [=](TestProgram& p) {
    return p.op(Op::cumsum, {f(p, {3, 6})}, {{"axis", int64_t{1}}, {"reverse", int64_t{1}}});
  };
  m["top_k_values"] = [=](TestProgram& p) {
    return p.op(Op::top_k_values, {f(p, {3, 8})}, {{"k", int64_t{3}}});
  };
  for (Op op : {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::all_to_all, Op::pvary}) {
    m[std::string(op_name(op))] = [=](TestProgram& p) {
      Attrs a{{"axis", std::string("data")}, {"axis_size", int64_t{1}}};
      if (op != Op::pvary) {
        a.set(op == Op::all_reduce ? "reduce" : "dim",
              op == Op::all_reduce ? AttrValue(std::string("sum")) : AttrValue(int64_t{0}));
      }
      return p.op(op, {f(p, {3, 4})}, a);
    };
  }
  m["scan"] = [=](TestProgram& p) {
    return scan_test::tiny_scan(p.g, f(p, {2, 3}), f(p, {3, 3, 3}, -1, 1), f(p, {3}), true)[1];
  };
  m["scan_result"] = [=](TestProgram& p) {
    std::vector<NodeId> r = scan_test::multi_scan(
        p.g, f(p, {4}), p.op(Op::reshape, {p.ints(DType::i32, {7})}, {{"shape", Ints{}}}),
        f(p, {3, 4}), f(p, {3, 2, 4}), f(p, {4}), false);
    return p.op(Op::add, {r[0], p.op(Op::reduce_sum, {r[2]}, reduce_attrs({0}, 0))});
  };
  m["attention"] = [=](TestProgram& p) {
    NodeId doc =
        p.op(Op::reshape, {p.ints(DType::i32, {0, 0, 0, 1, 2, 2, 2})}, {{"shape", Ints{1, 7}}});
    return p.op(Op::attention, {f(p, {1, 4, 7, 3}), f(p, {1, 2, 7, 3}), f(p, {1, 2, 7, 3}), doc},
                {{"scale", 0.6}});
  };
  m["sparse_attention"] = [=](TestProgram& p) {
    // Query t lists t, t - 2, t + 1 (past the end at the last) and -1: causal or not, the op
    // attends what it is given.
    Ints keys;
    for (int64_t t = 0; t < 7; ++t) {
      for (int64_t j : {t, t - 2, t + 1, int64_t{-1}}) keys.push_back(j);
    }
    NodeId listed = p.op(Op::reshape, {p.ints(DType::i32, keys)}, {{"shape", Ints{1, 7, 4}}});
    return p.op(Op::sparse_attention,
                {f(p, {1, 7, 4, 3}), f(p, {1, 7, 2, 3}), f(p, {1, 7, 2, 3}), listed},
                {{"scale", 0.6}});
  };
  m["dot_general"] = [=](TestProgram& p) {
    return p.op(Op::dot_general, {f(p, {2, 3, 4}), f(p, {2, 4, 5})},
                {{"lhs_batch", Ints{0}},
                 {"rhs_batch", Ints{0}},
                 {"lhs_contract", Ints{2}},
                 {"rhs_contract", Ints{1}}});
  };
  return m;
}

}  // namespace keel::cpu_test
