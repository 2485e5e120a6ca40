// Collectives across processes (issue 14): run as one process, and under mpirun with 2 and 4
// ranks. Each rank's input is a function of (rank, index), so every rank computes the
// expected result of the whole mesh locally and compares the reference interpreter's and the
// CPU backend's bytes with it; VJPs are checked by central differences across ranks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "autodiff/value_and_grad.h"
#include "backend/collectives.h"
#include "dist/communicator.h"
#include "dist/deadline.h"
#include "dist/fixed_order.h"
#include "nn/gpt.h"
#include "nn/layer_stack.h"
#include "nn/moe.h"
#include "tests/cpu_jit.h"
#include "tests/numbered_checkpoint.h"
#include "tests/tiny_gpt.h"
#include "trace/collectives.h"
#include "trace/compile.h"
#include "train/moment_shards.h"
#include "train/step.h"
#include "train/train_state.h"

namespace keel {
namespace {

// Inputs are each rank's own; so are results (a gathered value is the same everywhere anyway).
CompileOptions per_rank() {
  CompileOptions o;
  o.varying_arguments[0] = {"data"};
  o.varying_results[0] = {"data"};
  o.varying_results[1] = {"data"};
  return o;
}

int64_t ranks() {
  return backend::collectives().axis_size("data");
}
int64_t me() {
  return backend::collectives().axis_index("data");
}

// Rank `rank`'s input, n elements of `dtype` at `out`: magnitudes far apart so that another
// summation order changes the bits. Typed stores into one buffer: every rank builds every rank's
// input, and Array::set_f64 per element (this file is built at -O0) and the stacking's copies
// took half the 4-rank run's CPU.
void write_input(int64_t rank, DType dtype, int64_t n, std::byte* out) {
  const auto value = [&](int64_t i) {
    const double big = (i + rank) % 3 == 0 ? 1e7 : 1.0;
    const double sign = (rank + i) % 2 ? -1.0 : 1.0;
    return is_float(dtype) ? sign * big * (1.0 + 0.37 * double(rank) + 0.011 * double(i))
                           : sign * double(7 * rank + i);
  };
  // Typed values first, then their bytes: `out` holds bytes, not objects of the type.
  const auto fill = [&](auto convert) {
    std::vector<decltype(convert(0.0))> typed(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) typed[static_cast<size_t>(i)] = convert(value(i));
    std::memcpy(out, typed.data(), typed.size() * sizeof(typed[0]));
  };
  switch (dtype) {
    case DType::f32:
      fill([](double v) { return float(v); });
      break;
    case DType::bf16:
      fill([](double v) { return f32_to_bf16(float(v)); });
      break;
    case DType::i32:
      fill([](double v) { return int32_t(v); });
      break;
    case DType::i64:
      fill([](double v) { return int64_t(v); });
      break;
    case DType::boolean:
      throw Error("[test] collectives take numbers, not bool");
  }
}

Array input(int64_t rank, DType dtype, const Shape& shape) {
  Array a(dtype, shape);
  write_input(rank, dtype, a.numel(), a.data());
  return a;
}

// Every rank's input stacked [ranks, ...] as the blocks combine_blocks reads.
std::vector<std::byte> all_inputs(DType dtype, const Shape& shape) {
  const int64_t n = numel(shape);
  const auto bytes = static_cast<size_t>(n) * dtype_size(dtype);
  std::vector<std::byte> out(bytes * static_cast<size_t>(ranks()));
  for (int64_t r = 0; r < ranks(); ++r) {
    write_input(r, dtype, n, out.data() + static_cast<size_t>(r) * bytes);
  }
  return out;
}

Array expected_all_reduce(ReduceKind kind, DType dtype, const Shape& shape) {
  std::vector<std::byte> blocks = all_inputs(dtype, shape);
  Array out(dtype, shape);
  dist::combine_blocks(kind, dtype, blocks.data(), ranks(), out.numel());
  std::memcpy(out.data(), blocks.data(), out.nbytes());
  return out;
}

// Concatenation along dim of every rank's input.
Array expected_all_gather(DType dtype, const Shape& shape, int64_t dim) {
  Shape out_shape = shape;
  out_shape[static_cast<size_t>(dim)] *= ranks();
  Array out(dtype, out_shape);
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[static_cast<size_t>(d)];
  const size_t piece = Array(dtype, shape).nbytes() / static_cast<size_t>(outer);
  for (int64_t r = 0; r < ranks(); ++r) {
    const Array a = input(r, dtype, shape);
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(out.data() + (o * ranks() + r) * static_cast<int64_t>(piece),
                  a.data() + o * static_cast<int64_t>(piece), piece);
    }
  }
  return out;
}

// This rank's block along dim of the fixed-order sum of every rank's input.
Array expected_reduce_scatter(DType dtype, const Shape& shape, int64_t dim) {
  const Array sum = expected_all_reduce(ReduceKind::sum, dtype, shape);
  Shape out_shape = shape;
  out_shape[static_cast<size_t>(dim)] /= ranks();
  Array out(dtype, out_shape);
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[static_cast<size_t>(d)];
  const size_t piece = out.nbytes() / static_cast<size_t>(outer);
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(out.data() + o * static_cast<int64_t>(piece),
                sum.data() + (o * ranks() + me()) * static_cast<int64_t>(piece), piece);
  }
  return out;
}

// Block i along dim: rank i's block me() along dim.
Array expected_all_to_all(DType dtype, const Shape& shape, int64_t dim) {
  Array out(dtype, shape);
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[static_cast<size_t>(d)];
  const auto piece = static_cast<int64_t>(out.nbytes()) / outer / ranks();
  for (int64_t i = 0; i < ranks(); ++i) {
    const Array a = input(i, dtype, shape);
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(out.data() + (o * ranks() + i) * piece, a.data() + (o * ranks() + me()) * piece,
                  static_cast<size_t>(piece));
    }
  }
  return out;
}

// A CPU JIT with one cache for every rank (one compiles, the others load), its run directory
// under `dir` (each rank's own).
std::shared_ptr<runtime::CachedJit> shared_cache_jit(const testing_support::TempDir& dir) {
  runtime::JitConfig jc;
  jc.client = cpu::make_cpu_client();
  jc.cache.dir = std::string(KEEL_BINARY_DIR) + "/dist_mpi_cache";
  jc.run_dir = dir / "run";
  return std::make_shared<runtime::CachedJit>(jc);
}

struct Case {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<Array(DType, const Shape&)> expected;
  bool floats_only = false;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (ReduceKind k : {ReduceKind::sum, ReduceKind::max, ReduceKind::min}) {
    c.push_back({std::string("all_reduce_") + std::string(reduce_kind_name(k)),
                 [k](const Tensor& x) { return all_reduce(x, "data", k); },
                 [k](DType t, const Shape& s) { return expected_all_reduce(k, t, s); }});
  }
  for (int64_t dim : {0, 1}) {
    c.push_back({"all_gather_dim" + std::to_string(dim),
                 [dim](const Tensor& x) { return all_gather(x, "data", dim); },
                 [dim](DType t, const Shape& s) { return expected_all_gather(t, s, dim); }});
    c.push_back({"reduce_scatter_dim" + std::to_string(dim),
                 [dim](const Tensor& x) { return reduce_scatter(x, "data", dim); },
                 [dim](DType t, const Shape& s) { return expected_reduce_scatter(t, s, dim); },
                 true});
    c.push_back({"all_to_all_dim" + std::to_string(dim),
                 [dim](const Tensor& x) { return all_to_all(x, "data", dim); },
                 [dim](DType t, const Shape& s) { return expected_all_to_all(t, s, dim); }});
  }
  return c;
}

// Every collective and dtype, on the reference interpreter and on the CPU backend, equals the
// expected bytes on every rank; large tensors (the runtime's segments, the same code for both
// backends) on the CPU backend only. The cases of one shape and dtype are the outputs of one
// program: each program is a compile on the CPU.
TEST(DistMpi, CollectivesMatchTheReferenceOnEveryOpAndDtype) {
  testing_support::TempDir dir("dist_mpi_" + std::to_string(dist::world().rank()));
  auto cpu_jit = shared_cache_jit(dir);
  // The large reduce_scatter's blocks (3 * 2^20 elements) are cut into segments of
  // 2^22 / R elements: the last one shorter at 2 ranks, three whole ones at 4.
  const Shape large_scatter{3, int64_t{1} << 20};
  // Gathered along dim 1, each rank's block of a row is 256 KiB: a row at a time, straight into
  // the output (backend/collectives.h kRowByRowBlockBytes); the scatter's blocks above are too.
  const Shape large_gather{2, int64_t{1} << 16};
  const std::vector<Case> all = cases();
  for (const Shape& base :
       {Shape{3, 4, 5}, Shape{2, (int64_t{1} << 21) + 3}, large_scatter, large_gather}) {
    for (DType t : {DType::f32, DType::bf16, DType::i32, DType::i64}) {
      std::vector<const Case*> chosen;
      for (const Case& c : all) {
        if (c.floats_only && !is_float(t)) continue;
        if (base == large_scatter || base == large_gather) {
          const char* op = base == large_scatter ? "reduce_scatter" : "all_gather";
          if (!c.name.starts_with(op) || t != DType::f32) continue;
        } else if (base[1] > 100 && (t != DType::f32 || c.name != "all_reduce_sum")) {
          continue;
        }
        chosen.push_back(&c);
      }
      if (chosen.empty()) continue;
      Shape s = base;
      s[0] *= ranks();  // reduce_scatter needs dims that split over the ranks
      // The large all_reduce splits nothing: 2R + 1 rows of 2^21 + 3 are R segments of 2^22
      // and a last one of 2^21 + 6R + 3, which does not split evenly over 2 or 4 ranks.
      if (base[1] < 100) {
        s[1] *= ranks();
      } else if (base != large_scatter && base != large_gather) {
        s[0] += 1;
      }
      for (const bool on_cpu : {false, true}) {
        // The CPU kernel calls the same runtime as the interpreter: two widths suffice there,
        // and the large shapes (the runtime's segments) run there only.
        if (on_cpu && t != DType::f32 && t != DType::i64) continue;
        if (!on_cpu && base[1] > 100) continue;
        std::optional<JitScope> scope;
        if (on_cpu) scope.emplace(cpu_jit);
        auto f = compile(
            "collectives",
            [chosen](const Tensor& x) {
              std::vector<Tensor> out;
              for (const Case* c : chosen) out.push_back(c->fn(x));
              return out;
            },
            per_rank());
        const std::vector<Tensor> got = f(Tensor(input(me(), t, s)));
        ASSERT_EQ(got.size(), chosen.size());
        for (size_t i = 0; i < chosen.size(); ++i) {
          const Array want = chosen[i]->expected(t, s);
          ASSERT_EQ(got[i].shape(), want.shape()) << chosen[i]->name;
          EXPECT_TRUE(got[i].array().same_bytes(want))
              << chosen[i]->name << " " << dtype_name(t) << (on_cpu ? " cpu" : " ref") << " rank "
              << me();
        }
      }
    }
  }
}

TEST(DistMpi, AxisIndexIsTheRankOnTheAxis) {
  auto f = compile(
      "axis_index", [](const Tensor& x) { return x + cast(axis_index("data"), DType::f32); },
      per_rank());
  EXPECT_EQ(f(Tensor(Array::scalar(0.5))).item(), 0.5 + double(me()));
}

// The objective is the same on every rank; rank r's gradient is dL/dx_r, checked by central
// differences that move one rank's input at a time (every rank runs every evaluation).
TEST(DistMpi, CollectiveGradientsMatchFiniteDifferences) {
  const Shape s{2 * ranks(), 3};
  std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> fns = {
      {"all_reduce_sum", [](const Tensor& x) { return all_reduce(x * x, "data"); }},
      {"all_reduce_max",
       [](const Tensor& x) { return all_reduce(x * x, "data", ReduceKind::max); }},
      {"all_gather_invariant",
       [](const Tensor& x) { return all_gather_invariant(x * x, "data", 1); }},
      {"reduce_scatter",
       [](const Tensor& x) {
         return all_gather_invariant(sin(reduce_scatter(x * x, "data", 0)), "data", 0);
       }},
      {"all_to_all",
       [](const Tensor& x) {
         return all_gather_invariant(sin(all_to_all(x * x, "data", 0)), "data", 0);
       }},
      {"all_to_all_dim1",
       [](const Tensor& x) {
         const Tensor y = reshape(x * x + x, {3, 2 * ranks()});  // dim 1 splits over the ranks
         return all_gather_invariant(sin(all_to_all(y, "data", 1)), "data", 0);
       }},
  };
  for (const auto& [name, fn] : fns) {
    auto loss_of = [fn = fn](const Tensor& x) {
      Tensor y = fn(x);
      Tensor w = cast(iota(y.shape(), 1, DType::i32), DType::f32) + 0.5;
      return sum(y * w);
    };
    auto vg = compile(
        name + "_vg",
        [loss_of](const Tensor& x) {
          auto [l, g] = value_and_grad(loss_of)(x);
          return std::tuple<Tensor, Tensor>{l, g};
        },
        per_rank());
    auto loss = compile(name + "_loss", loss_of, per_rank());
    Array x(DType::f32, s);
    for (int64_t i = 0; i < x.numel(); ++i)
      x.set_f64(i, 0.3 + 0.1 * double(i) + 0.05 * double(me()));
    const Array g = std::get<1>(vg(Tensor(x))).array();
    for (int64_t r = 0; r < ranks(); ++r) {
      for (int64_t i : {int64_t{0}, x.numel() / 2, x.numel() - 1}) {
        const double eps = 1e-2;
        auto at = [&](double delta) {
          Array moved = x.clone();
          if (me() == r) moved.set_f64(i, moved.get_f64(i) + delta);
          return loss(Tensor(moved)).item();
        };
        const double fd = (at(eps) - at(-eps)) / (2 * eps);
        if (me() == r) {
          EXPECT_NEAR(g.get_f64(i), fd, 2e-2 + 2e-3 * std::abs(fd)) << name << " " << i;
        }
      }
    }
  }
}

// Deterministic values of every rank's test input.
Array values(const Shape& shape, double scale, double phase) {
  Array a(DType::f32, shape);
  for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, scale * std::sin(0.37 * double(i) + phase));
  return a;
}

// Rows [first, first + count) of an f32 array.
Array rows_of(const Array& whole, int64_t first, int64_t count) {
  Shape s = whole.shape();
  const int64_t row = whole.numel() / s[0];
  s[0] = count;
  Array out(whole.dtype(), s);
  std::memcpy(out.data(), whole.data() + first * row * 4, static_cast<size_t>(count * row * 4));
  return out;
}

// Expert parallelism over "data" (nn/moe.h): each process routes its own tokens, holds a block
// of the experts (one copy per source) and exchanges their slots with all_to_all. Its loss, its
// tokens' and its router's gradients equal, bit for bit, what one process holding every expert
// computes for those tokens, and so does each source's gradient of the block.
TEST(DistMpi, ExpertsSpreadOverDataEqualOneProcessHoldingEveryExpert) {
  const int64_t D = ranks(), E = 4, C = 8, F = 8, held = E / D;
  const Shape xs{2, 5, C};
  for (const double factor : {0.5, 4.0}) {  // choices dropped for capacity, and none dropped
    nn::MoeConfig c;
    c.experts = E;
    c.top_k = 2;
    c.hidden = F;
    c.shared_expert = false;
    c.capacity_factor = factor;
    const Array router = values({C, E}, 0.8, 0.1), c_fc = values({E, C, 2 * F}, 0.5, 0.7),
                c_proj = values({E, F, C}, 0.5, 1.3), w = values(xs, 1.0, 2.1);
    auto x_of = [&](int64_t s) { return values(xs, 1.0, 0.5 + double(s)); };
    // (loss, its gradients) of [router, c_fc, c_proj, x].
    auto vg = [c, w](const std::vector<Tensor>& p) {
      auto loss = [c, w](const std::vector<Tensor>& q) {
        const NamedTensors named{{"moe.router.weight", q[0]},
                                 {"moe.experts.c_fc.weight", q[1]},
                                 {"moe.experts.c_proj.weight", q[2]}};
        const nn::MoeOutput o = nn::moe_ffn(c, named, "moe", q[3]);
        return sum(o.y * constant(w)) + o.aux_loss;
      };
      auto [l, g] = value_and_grad(loss)(p);
      std::vector<Tensor> out{l};
      out.insert(out.end(), g.begin(), g.end());
      return out;
    };
    auto whole = compile("moe_whole", vg);
    CompileOptions o;
    o.varying_arguments[0] = {"data"};
    for (int r = 0; r < 5; ++r) o.varying_results[r] = {"data"};
    auto spread = compile("moe_spread", vg, o);
    // One process holding every expert, on each source's tokens.
    std::vector<std::vector<Tensor>> want;
    for (int64_t s = 0; s < D; ++s) {
      want.push_back(whole(
          std::vector<Tensor>{Tensor(router), Tensor(c_fc), Tensor(c_proj), Tensor(x_of(s))}));
    }
    // The block [held, ...] once per source: [D, held, ...].
    auto per_source = [&](const Array& all) {
      const Array block = rows_of(all, me() * held, held);
      Shape s = block.shape();
      s.insert(s.begin(), D);
      Array out(DType::f32, s);
      for (int64_t d = 0; d < D; ++d) {
        std::memcpy(out.data() + d * block.nbytes(), block.data(), block.nbytes());
      }
      return out;
    };
    const std::vector<Tensor> got = spread(std::vector<Tensor>{
        Tensor(router), Tensor(per_source(c_fc)), Tensor(per_source(c_proj)), Tensor(x_of(me()))});
    const std::string at = fmt::format("factor {} rank {} of {}", factor, me(), D);
    const std::vector<Tensor>& mine = want[static_cast<size_t>(me())];
    EXPECT_TRUE(got[0].array().same_bytes(mine[0].array())) << "loss, " << at;
    EXPECT_TRUE(got[1].array().same_bytes(mine[1].array())) << "router gradient, " << at;
    EXPECT_TRUE(got[4].array().same_bytes(mine[4].array())) << "tokens' gradient, " << at;
    for (size_t k : {size_t{2}, size_t{3}}) {
      const Array g = got[k].array();
      const int64_t n = g.numel() / D;
      for (int64_t s = 0; s < D; ++s) {
        const Array want_s = rows_of(want[static_cast<size_t>(s)][k].array(), me() * held, held);
        EXPECT_EQ(std::memcmp(g.data() + s * n * 4, want_s.data(), static_cast<size_t>(n * 4)), 0)
            << "expert gradient " << k << " of source " << s << ", " << at;
      }
    }
  }
}

// A gather read by each process's own loss (FSDP's parameters): the objective is the sum of the
// processes' losses, so block s of x's gradient sums every process's use of it: the gradient of
// all_gather is the reduce_scatter of its cotangent. all_gather_invariant's (this process's block
// alone) is right only for an objective every process holds the same copy of: here it misses the
// other processes' terms whenever there are any.
TEST(DistMpi, AGatherEachProcessUsesHasTheReduceScatterOfItsCotangentAsGradient) {
  const int64_t n = 3, N = ranks();
  // Loss of rank r: sum_j y[j] * (1 + j + 10 r), y = every rank's x: small integers, exact in f32.
  auto gradient = [&](bool invariant) {
    auto loss_of = [invariant](const Tensor& x) {
      const Tensor y = invariant ? all_gather_invariant(x, "data") : all_gather(x, "data");
      const Tensor w = cast(iota(y.shape(), 0, DType::i32), DType::f32) + 1.0 +
                       10.0 * cast(axis_index("data"), DType::f32);
      return sum(y * w);
    };
    auto vg = compile(
        invariant ? "gather_invariant_grad" : "gather_grad",
        [loss_of](const Tensor& x) {
          auto [l, g] = value_and_grad(loss_of)(x);
          return std::tuple<Tensor, Tensor>{l, g};
        },
        per_rank());
    return std::get<1>(vg(Tensor(Array::full({n}, 1.0)))).array();
  };
  const Array summed = gradient(false), own = gradient(true);
  for (int64_t i = 0; i < n; ++i) {
    const double j = double(me() * n + i);
    double want = 0;  // sum over ranks r of (1 + j + 10 r)
    for (int64_t r = 0; r < N; ++r) want += 1.0 + j + 10.0 * double(r);
    EXPECT_EQ(summed.get_f64(i), want) << "rank " << me() << " element " << i;
    EXPECT_EQ(own.get_f64(i), 1.0 + j + 10.0 * double(me())) << "rank " << me();
  }
}

// ZeRO stage 2's global norm (train/step.h): summed from each process's slices of the gradients
// in norm blocks, it has the bits of the same sum over the whole gradients at every process
// count, on the reference and on the CPU backend, also where a slice is one block of a large
// tensor. Adding each process's share first and then the processes (a delayed reduction) does
// not, which shows the inputs tell the orders apart.
TEST(DistMpi, TheNormOfGradientSlicesHasTheBitsOfTheWholeNorm) {
  const int64_t N = ranks();
  testing_support::TempDir dir("dist_norm_" + std::to_string(dist::world().rank()));
  auto cpu_jit = shared_cache_jit(dir);
  // The same on every process: squares over eight decades, so the order of the adds shows.
  auto gradient = [](int64_t seed, const Shape& shape) {
    Array a(DType::f32, shape);
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double decade = std::pow(10.0, (i + seed) % 5 - 2);
      a.set_f64(i, (1.0 + 0.37 * std::sin(double(i + seed))) * decade);
    }
    return Tensor(a);
  };
  train::NamedTensors whole;
  whole["a"] = gradient(0, {48, 30});
  whole["b"] = gradient(1, {64});
  whole["c"] = gradient(2, {12, 20});
  // N norm blocks (17^4 is prime to 720720): each process's slice is one block, one long row.
  const train::NamedTensors one_block_each = {{"d", gradient(3, {N, 83521})}};
  // Scanned stacks: each process holds its part of each layer, whose norm blocks (4 of 17^3
  // each; 720 of 16) are added in the layers' order, not the processes'.
  const train::NamedTensors stack = {{"scan.0.0.w", gradient(4, {6, 4, 4913})},
                                     {"scan.0.1.w", gradient(5, {3, 720, 16})}};
  auto norms_of = [N](const train::NamedTensors& g) {
    train::NamedTensors mine;
    std::map<std::string, TensorType> types;
    Tensor shares = full({}, 0.0);
    for (const auto& [name, t] : g) {
      mine[name] = train::own_slice(name, t, N);
      types[name] = t.type();
      shares = shares + sum(mine[name] * mine[name]);
    }
    return std::tuple<Tensor, Tensor, Tensor>{train::gradient_squares(g),
                                              train::sliced_gradient_squares(mine, types, N),
                                              all_reduce(shares, "data")};
  };
  for (bool on_cpu : {false, true}) {
    std::optional<JitScope> scope;
    if (on_cpu) scope.emplace(cpu_jit);
    auto norms = compile("slice_norms", norms_of);
    const std::string where = fmt::format("{} processes, {}", N, on_cpu ? "cpu" : "ref");
    for (const train::NamedTensors* g : {&std::as_const(whole), &one_block_each, &stack}) {
      const auto [from_whole, from_slices, delayed] = norms(*g);
      const Array w = from_whole.array(), s = from_slices.array();
      EXPECT_EQ(std::memcmp(w.data(), s.data(), w.nbytes()), 0)
          << w.get_f64(0) << " " << s.get_f64(0) << " at " << where;
      if (N > 1 && g == &whole) {
        EXPECT_NE(delayed.array().get_f64(0), w.get_f64(0)) << "no order shows at " << where;
      }
    }
  }
}

// Contract 8 across processes: a loss that still varies over the data axis is refused at
// trace time, naming the result and the axis; reduced, it is the same on every rank.
TEST(DistMpi, AMetricReadBeforeItsAllReduceIsRefusedAndAfterItAgrees) {
  CompileOptions o;
  o.varying_arguments[0] = {"data"};
  auto bad = compile(
      "planted_metric", [](const Tensor& batch) { return sum(batch * batch); }, o);
  try {
    bad(Tensor(input(me(), DType::f32, {4})));
    FAIL() << "a varying metric was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("varies over mesh axis 'data'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("missing all_reduce over data"), std::string::npos);
  }
  auto good = compile(
      "reduced_metric", [](const Tensor& batch) { return all_reduce(sum(batch * batch), "data"); },
      o);
  const double mine = good(Tensor(input(me(), DType::f32, {4}))).item();
  std::vector<double> all(static_cast<size_t>(dist::world().size()));
  dist::world().all_gather(&mine, all.data(), sizeof mine);
  for (double v : all) EXPECT_EQ(v, mine);
}

// Issue 15: ranks that traced different programs all stop before running them, each naming the
// ranks that differ from rank 0 and why, instead of blocking in a collective that never matches.
TEST(DistMpi, ProgramsThatDifferAcrossRanksStopEveryRankBeforeTheyRun) {
  if (ranks() < 2) GTEST_SKIP() << "needs 2 or more processes";
  auto f = compile(
      "rank_shaped", [](const Tensor& x) { return all_reduce(sum(x), "data"); },
      [] {
        CompileOptions o;
        o.varying_arguments[0] = {"data"};
        return o;
      }());
  const int64_t n = me() == 1 ? 5 : 4;  // rank 1 traces f32[5], the others f32[4]
  try {
    f(Tensor(input(me(), DType::f32, {n})));
    FAIL() << "rank " << me() << " ran a program rank 1 does not have";
  } catch (const dist::LaunchFailure& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[dist] the processes disagree on program 'rank_shaped' before its first "
                         "run",
                         0),
              0u)
        << what;
    EXPECT_NE(what.find("; rank 1 (host " + dist::host_of_rank(1) +
                        ") differs from rank 0: input 0 (argument 0) shape f32[4] -> f32[5]"),
              std::string::npos)
        << what;
  }
  dist::world().barrier();  // every rank got here: nobody hung
}

// Issue 15: a peer that never joins a collective is named within the deadline, with what the
// waiting thread was in, instead of blocking it forever.
TEST(DistMpi, APeerThatDoesNotArriveIsNamedWithinTheDeadline) {
  if (ranks() < 2) GTEST_SKIP() << "needs 2 or more processes";
  const dist::WaitLimits before = dist::wait_limits();
  dist::set_wait_limits({1, 1});
  std::unique_ptr<dist::Communicator> comm = dist::world().split(0, dist::world().rank());
  if (comm->rank() != 1) {
    dist::WaitScope scope("the test's all_gather");
    const int32_t mine = comm->rank();
    std::vector<int32_t> all(static_cast<size_t>(comm->size()));
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->all_gather(&mine, all.data(), sizeof mine);
      FAIL() << "an all_gather without rank 1 completed";
    } catch (const dist::PeerTimeout& e) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(waited, 10.0);
      EXPECT_EQ(std::string(e.what()),
                fmt::format("[dist] rank 1 (host {}) did not arrive within 1 s: rank {} (host {}) "
                            "was waiting in the test's all_gather; the launch ends here (a "
                            "stopped or hung process, or a lost network); raise "
                            "spmd.collective_timeout_s if the wait is legitimate, or resume from "
                            "the last checkpoint",
                            dist::host_of_rank(1), dist::world().rank(),
                            dist::host_of_rank(dist::world().rank())));
    }
  }
  dist::set_wait_limits(before);
  dist::world().barrier();
}

// Processes in different collectives at the same point (another size, another kind, or the
// same kind and size made from another place) are told apart at once, each naming both sides,
// instead of exchanging mismatched bytes or waiting out the deadline.
TEST(DistMpi, CollectivesOutOfStepAreNamedAtOnce) {
  if (ranks() < 2) GTEST_SKIP() << "needs 2 or more processes";
  const dist::WaitLimits before = dist::wait_limits();
  dist::set_wait_limits({60, 60});
  const int me = dist::world().rank();
  enum Other { size, kind, place };
  for (Other other_kind : {size, kind, place}) {
    std::unique_ptr<dist::Communicator> comm = dist::world().split(0, me);
    const size_t n = static_cast<size_t>(comm->size());
    const auto start = std::chrono::steady_clock::now();
    try {
      if (me == 1) {
        dist::WaitScope scope("the test's gradients");
        if (other_kind == kind) {
          comm->barrier();
        } else if (other_kind == place) {  // the same inner scope, inside another outer one
          dist::WaitScope inner("the test's all_gather");
          const int32_t mine = me;
          std::vector<int32_t> all(n);
          comm->all_gather(&mine, all.data(), sizeof mine);
        } else {
          const int64_t mine = me;
          std::vector<int64_t> all(n);
          comm->all_gather(&mine, all.data(), sizeof mine);
        }
      } else {
        dist::WaitScope scope("the test's stop check");
        std::optional<dist::WaitScope> inner;
        if (other_kind == place) inner.emplace("the test's all_gather");
        const int32_t mine = me;
        std::vector<int32_t> all(n);
        comm->all_gather(&mine, all.data(), sizeof mine);
      }
      ADD_FAILURE() << "collectives out of step completed on rank " << me;
    } catch (const dist::CollectivesOutOfStep& e) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(waited, 10.0);
      const std::string gather =
          other_kind == place
              ? "all_gather of 4 bytes per process (the test's stop check > the test's all_gather)"
              : "all_gather of 4 bytes per process (the test's stop check)";
      const std::string other = other_kind == kind ? "barrier (the test's gradients)"
                                : other_kind == place
                                    ? "all_gather of 4 bytes per process (the test's gradients > "
                                      "the test's all_gather)"
                                    : "all_gather of 8 bytes per process (the test's gradients)";
      // Rank 1 names the first other rank whose header it read; the others name rank 1.
      std::vector<std::string> expected;
      for (int peer = 0; peer < comm->size(); ++peer) {
        if (peer == me || (me != 1 && peer != 1)) continue;
        expected.push_back(fmt::format(
            "[dist] rank {} (host {}) and rank {} (host {}) are out of step at collective #1 of "
            "their communicator: rank {} is in {}; rank {} is in {}. Every process must make "
            "the same collectives in the same order, so the launch ends here; look for a branch "
            "that depends on the rank in the calling code, else it is a keel bug: report it with "
            "both ranks' lines",
            me, dist::host_of_rank(me), peer, dist::host_of_rank(peer), me,
            me == 1 ? other : gather, peer, me == 1 ? gather : other));
      }
      EXPECT_NE(std::find(expected.begin(), expected.end(), std::string(e.what())), expected.end())
          << e.what();
    }
    dist::WaitScope resync("the test's resync", true);
    dist::world().barrier();
  }
  dist::set_wait_limits(before);
}

// A context that names the process itself (its rank, its host) differs by design: collectives
// made in one are not compared by where they were made, and complete.
TEST(DistMpi, ContextsThatNameTheirProcessAreNotCompared) {
  if (ranks() < 2) GTEST_SKIP() << "needs 2 or more processes";
  const int me = dist::world().rank();
  const int32_t mine = me;
  std::vector<int32_t> all(static_cast<size_t>(dist::world().size()));
  {
    dist::WaitScope scope(fmt::format("the test's exchange for rank {}", me), false, true);
    EXPECT_EQ(dist::wait_site(), 0u);
    dist::world().all_gather(&mine, all.data(), sizeof mine);
  }
  for (int r = 0; r < dist::world().size(); ++r) EXPECT_EQ(all[size_t(r)], r);
  dist::WaitScope same("the test's exchange");
  EXPECT_NE(dist::wait_site(), 0u);
  dist::world().barrier();
}

// A broadcast whose ranks disagree on its root is out of step too: the root checks the headers
// of the ranks it sends to, so neither rank returns as if it had the data.
TEST(DistMpi, ABroadcastWithTwoRootsIsOutOfStep) {
  if (ranks() < 2) GTEST_SKIP() << "needs 2 or more processes";
  const int me = dist::world().rank();
  std::unique_ptr<dist::Communicator> comm = dist::world().split(me < 2 ? 0 : 1, me);
  if (me < 2) {
    int64_t value = me;
    try {
      dist::WaitScope scope("the test's broadcast");
      comm->broadcast(&value, sizeof value, me);  // each one takes itself for the root
      ADD_FAILURE() << "a broadcast with two roots completed on rank " << me;
    } catch (const dist::CollectivesOutOfStep& e) {
      const std::string want = fmt::format(
          "rank {} is in broadcast of 8 bytes from rank {} (the test's broadcast); "
          "rank {} is in broadcast of 8 bytes from rank {} (the test's broadcast).",
          me, me, 1 - me, 1 - me);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  dist::WaitScope resync("the test's resync", true);
  dist::world().barrier();
}

// The time a process waits for its peers is counted (the trainer's busy figures subtract it):
// the ranks that wait for a late rank 0 count its lateness; rank 0 counts almost none.
TEST(DistMpi, WaitingForPeersIsCounted) {
  if (ranks() < 2) GTEST_SKIP() << "needs 2 or more processes";
  dist::world().barrier();
  const double before = dist::collective_wait_seconds();
  if (dist::world().rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  dist::world().barrier();
  const double waited = dist::collective_wait_seconds() - before;
  if (dist::world().rank() == 0) {
    EXPECT_LT(waited, 0.5);
  } else {
    EXPECT_GT(waited, 0.5);
    EXPECT_LT(waited, 10.0);
  }
}

// Waiting out the leader's own work (a checkpoint, sampling) takes the long deadline; the same
// wait under the short one names the leader.
TEST(DistMpi, WaitingForTheLeaderTakesTheLongDeadline) {
  if (ranks() < 2) GTEST_SKIP() << "needs 2 or more processes";
  const dist::WaitLimits before = dist::wait_limits();
  dist::set_wait_limits({1, 30});
  for (bool long_wait : {true, false}) {
    std::unique_ptr<dist::Communicator> comm = dist::world().split(0, dist::world().rank());
    if (comm->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    try {
      dist::WaitScope scope("the leader's sampling", long_wait);
      comm->barrier();
      EXPECT_TRUE(long_wait || comm->rank() == 0) << "rank " << comm->rank();
    } catch (const dist::PeerTimeout& e) {
      EXPECT_FALSE(long_wait) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 0 (host " + dist::host_of_rank(0) +
                                           ") did not arrive within 1 s"),
                std::string::npos)
          << e.what();
    }
    dist::WaitScope resync("the test's resync", true);
    dist::world().barrier();
  }
  dist::set_wait_limits(before);
}

// Issue 15: for a program every rank prepares, one writer per cache directory compiles and
// publishes it and the others load it (a shared directory: rank 0; per host: the lowest rank of
// each host, and these ranks share one). The entry records the writer's host.
TEST(DistMpi, OneWriterPerCacheDirectoryCompilesAProgramEveryRankPrepares) {
  for (cache::Sharing sharing : {cache::Sharing::shared, cache::Sharing::per_host}) {
    const std::string dir = fmt::format("{}/dist_mpi_election_{}_{}", KEEL_BINARY_DIR,
                                        cache::sharing_name(sharing), dist::world().size());
    if (dist::world().rank() == 0) std::filesystem::remove_all(dir);
    dist::world().barrier();
    runtime::JitConfig jc;
    jc.client = cpu::make_cpu_client();
    jc.cache.dir = dir;
    jc.cache.sharing = sharing;
    jc.cache.host = dist::process_place().host;
    auto jit = std::make_shared<runtime::CachedJit>(jc);
    {
      JitScope scope(jit);
      auto f = compile(
          "elected", [](const Tensor& x) { return all_reduce(x * 3.0, "data"); }, per_rank());
      // Readers run what the writer compiled: the same sum as every rank's own compile.
      const double got = f(Tensor(input(me(), DType::f32, {4}))).array().get_f64(1);
      std::vector<double> sums(static_cast<size_t>(dist::world().size()));
      dist::world().all_gather(&got, sums.data(), sizeof got);
      for (double v : sums) EXPECT_EQ(v, got);
    }
    const int32_t compiles = static_cast<int32_t>(jit->log().totals().compiles);
    std::vector<int32_t> all(static_cast<size_t>(dist::world().size()));
    dist::world().all_gather(&compiles, all.data(), sizeof compiles);
    int32_t total = 0;
    for (int32_t c : all) total += c;
    EXPECT_EQ(total, 1) << cache::sharing_name(sharing);
    EXPECT_EQ(compiles, me() == 0 ? 1 : 0) << "rank " << me();
    const std::vector<cache::Manifest> entries = jit->cache().list();
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].host, dist::host_of_rank(0));
    dist::world().barrier();
  }
}

// A cache writer that cannot prepare a program (here the budget refuses it before its compile)
// tells its readers, which stop with its reason instead of waiting for an entry that never comes.
TEST(DistMpi, AWriterThatCannotPrepareAProgramStopsItsReadersWithItsReason) {
  if (ranks() < 2) GTEST_SKIP() << "needs 2 or more processes";
  const dist::WaitLimits before = dist::wait_limits();
  dist::set_wait_limits({5, 5});  // a reader left waiting fails fast instead of in 15 minutes
  runtime::JitConfig jc;
  jc.client = cpu::make_cpu_client();
  jc.cache.dir = std::string(KEEL_BINARY_DIR) + "/dist_mpi_cache";
  jc.memory_budget_bytes = 64;
  JitScope scope(std::make_shared<runtime::CachedJit>(jc));
  auto f = compile(
      "refused_everywhere", [](const Tensor& x) { return all_reduce(x * 5.0, "data"); },
      per_rank());
  const std::string reason = "[jit] program 'refused_everywhere' is predicted to need ";
  try {
    f(Tensor(input(me(), DType::f32, {64})));
    ADD_FAILURE() << "rank " << me() << " ran a program over the budget";
  } catch (const dist::LaunchFailure& e) {  // a reader: the writer's reason, named
    const std::string what = e.what();
    EXPECT_NE(me(), 0) << what;
    EXPECT_EQ(what.rfind(fmt::format("[jit] rank 0 (host {}) could not prepare program "
                                     "'refused_everywhere', so this rank stops too: {}",
                                     dist::host_of_rank(0), reason),
                         0),
              0u)
        << what;
    EXPECT_NE(what.find("refused before compiling it"), std::string::npos) << what;
  } catch (const Error& e) {  // the writer: its own refusal
    EXPECT_EQ(me(), 0) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(reason, 0), 0u) << e.what();
  }
  EXPECT_TRUE(dist::failure_shared());
  dist::set_wait_limits(before);
  dist::world().barrier();
}

// Issue 15: the memory budget is per host (the physical device): a program that every rank runs
// needs its peak once per process on the host.
TEST(DistMpi, TheMemoryBudgetCountsEveryProcessOnTheHost) {
  if (ranks() < 2) GTEST_SKIP() << "needs 2 or more processes";
  testing_support::TempDir dir("dist_mpi_budget_" + std::to_string(dist::world().rank()));
  auto program = [] {
    return compile(
        "budgeted", [](const Tensor& x) { return all_reduce(x * 2.0, "data"); }, per_rank());
  };
  runtime::JitConfig jc;
  jc.client = cpu::make_cpu_client();
  jc.cache.dir = std::string(KEEL_BINARY_DIR) + "/dist_mpi_cache";
  auto unlimited = std::make_shared<runtime::CachedJit>(jc);
  {
    JitScope scope(unlimited);
    program()(Tensor(input(me(), DType::f32, {64})));
  }
  const int64_t peak = unlimited->predicted_peak_bytes();
  ASSERT_GT(peak, 0);
  const int64_t here = dist::processes_on_this_host();
  ASSERT_EQ(here, dist::world().size());     // one host
  jc.memory_budget_bytes = peak * here - 1;  // enough for one process, not for all of them
  auto budgeted = std::make_shared<runtime::CachedJit>(jc);
  JitScope scope(budgeted);
  try {
    program()(Tensor(input(me(), DType::f32, {64})));
    FAIL() << "rank " << me() << " ran past a budget its host's processes exceed together";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format(
                  "[jit] program 'budgeted' is predicted to need {} bytes at its peak in each of "
                  "the {} processes on host {}, {} bytes together but "
                  "launch.memory_budget_bytes is {} per host",
                  peak, here, dist::process_place().host, peak * here, peak * here - 1)),
              std::string::npos)
        << e.what();
  }
  dist::world().barrier();
}

// A scanned stack's slices are each process's part of every layer (so stage 3 gathers a layer),
// on the host as in a trace; gathered back, layer by layer or whole, they are the stack. Every
// gather runs before the assertions, so no process leaves the others waiting in one.
TEST(DistMpi, AStacksSliceIsAPartOfEachLayer) {
  const int64_t N = ranks(), r = me();
  const std::string name = "scan.0.0.w";
  const TensorType type{DType::f32, {3, 2, 4 * N}};
  Array whole(DType::f32, type.shape);
  for (int64_t i = 0; i < whole.numel(); ++i) whole.set_f64(i, static_cast<double>(i));
  const Array mine = train::slice_moments({{name, Tensor(whole)}}, N, r).at(name).array();
  auto traced = compile(
      "own_slice", [&](const Tensor& w) { return train::own_slice(name, w, N); }, per_rank());
  const Array in_trace = traced(Tensor(whole)).array();
  const Array back = train::gather_moments({{name, Tensor(mine)}}, {{name, type}}).at(name).array();
  const Array layer1 = train::gather_layer(name, Tensor(mine), type, 1);
  ASSERT_EQ(mine.shape(), (Shape{3 * 8}));
  for (int64_t layer = 0; layer < 3; ++layer) {  // elements [layer*8N + r*8, +8) of the stack
    EXPECT_EQ(mine.get_f64(layer * 8), static_cast<double>(layer * 8 * N + r * 8)) << layer;
  }
  EXPECT_TRUE(in_trace.same_bytes(mine));
  EXPECT_TRUE(back.same_bytes(whole));
  ASSERT_EQ(layer1.shape(), (Shape{2, 4 * N}));
  EXPECT_EQ(std::memcmp(layer1.data(), whole.data() + 8 * N * 4, layer1.nbytes()), 0);
}

// Issue 50 item 5: a state split over the processes (ZeRO 1 and 3, per layer and scanned) fills
// its slices from a checkpoint and writes the checkpoint it came from, bit for bit, the writer
// asking for one stored tensor's gather at a time while every other process sends its slices. No
// assertion returns early: the other processes would wait in a gather.
TEST(DistMpi, AStateSplitOverTheProcessesIsGatheredOneStoredTensorAtATime) {
  const nn::GptConfig c = testing_support::tiny_code();
  const train::CheckpointData file = testing_support::numbered_checkpoint(c);
  const bool writer = me() == 0;
  auto same = [](const auto& got, const auto& want, const std::string& where) {
    EXPECT_EQ(got.size(), want.size()) << where;
    for (const auto& [name, value] : want) {
      const auto it = got.find(name);
      EXPECT_TRUE(it != got.end() && Tensor(it->second).array().same_bytes(Tensor(value).array()))
          << name << ", " << where;
    }
  };
  for (const auto& [stage, stacked] : {std::pair{1, false}, {1, true}, {3, false}, {3, true}}) {
    nn::GptConfig m = c;
    m.layout.scanned = stacked;
    const std::string where =
        fmt::format("{} processes, stage {}, stacked {}", ranks(), stage, stacked);
    train::TrainState state =
        train::allocated_state(m, stacked, train::StateShards::at_stage(stage, ranks()));
    train::checkpoint_into_state(file, m, "numbered", state);
    if (writer) {
      train::CheckpointData d;
      train::state_to_checkpoint(state, m, d);
      const bool split = ranks() > 1;  // streamed when split or stacked
      EXPECT_EQ(bool(d.model_tensor), stacked || (split && stage == 3)) << where;
      EXPECT_EQ(bool(d.optimizer_tensor), stacked || split) << where;
      train::hold_all_tensors(d);
      same(d.model, file.model, where);
      same(d.optimizer, file.optimizer, where);
    } else {
      train::send_moments_for_checkpoint(state, m);
    }
  }
  dist::world().barrier();
}

}  // namespace
}  // namespace keel
