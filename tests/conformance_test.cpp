// One conformance suite over every registered backend (the ggml test-backend-ops idea): every
// op, seeded random graphs and the gradient of every differentiable op against the reference
// interpreter, and a finite-difference mode that checks each backend's gradients against central
// differences it computes itself. A new backend is tested by registering it: its name joins the
// instances below. Tolerances are backend_cpu_program.h's (the header of backend_cpu_test.cpp
// says why); finite differences: 1e-2 relative plus 2e-3 absolute, as autodiff_test's.
// `conformance_test --perf` is the performance mode (conformance_perf.cpp; make bench runs it).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "backend/ref/interpreter.h"
#include "backend/registry.h"
#include "policy/resolve.h"
#include "runtime/backends.h"
#include "runtime/policy_config.h"
#include "runtime/runtime.h"
#include "tests/backend_clients.h"
#include "tests/backend_cpu_cases.h"
#include "tests/backend_cpu_random.h"
#include "tests/conformance_perf.h"
#include "tests/fd_cases.h"

namespace keel {
namespace {

using namespace cpu_test;  // NOLINT: the cases are the suite's own

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  // A backend this machine cannot run (a GPU's without one) is skipped with its reason.
  void SetUp() override {
    if (const std::string why = unavailable_here(GetParam()); !why.empty()) {
      GTEST_SKIP() << GetParam() << ": " << why;
    }
  }
  backend::Client& client() { return client_of(GetParam()); }
  // Whether the backend's programs cannot hold `g` yet (an op without a kernel): then the case
  // is left out, named on stdout.
  bool leaves_out(const std::string& what, const Graph& g) {
    const std::string op = op_without_kernel(GetParam(), g);
    if (!op.empty())
      std::printf("%s: left out %s (%s has no kernel yet)\n", GetParam().c_str(), what.c_str(),
                  op.c_str());
    return !op.empty();
  }
  bool has_ops_without_kernels() {
    return !backend::find_backend(GetParam()).ops_without_kernels.empty();
  }
};

// `y`'s contribution to a gradient case's loss: the sum of y times a random weight.
NodeId loss_term(TestProgram& p, NodeId y) {
  Ints axes(p.g.node(y).type.shape.size());
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
  return p.op(Op::reduce_sum, {p.op(Op::mul, {y, p.random(DType::f32, p.g.node(y).type.shape)})},
              reduce_attrs(axes, 0));
}

// The loss's value and its gradient with respect to every f32 input of `p`.
Graph value_and_gradients(const TestProgram& p) {
  std::vector<size_t> wrt;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (p.inputs[i].dtype() == DType::f32) wrt.push_back(i);
  }
  return autodiff::value_and_grad(p.g, 0, wrt);
}
// The reference backend runs the interpreter, so comparing it with the interpreter proves
// nothing: it takes the finite-difference mode only.
class FiniteDifferences : public Conformance {};

std::vector<std::string> backends_but_the_reference() {
  std::vector<std::string> out;
  for (const std::string& name : registered_backend_names()) {
    if (name != "ref") out.push_back(name);
  }
  return out;
}

TEST_P(Conformance, EveryOpMatchesTheReference) {
  const auto cases = op_cases();
  TestProgram p("every_op");
  for (const OpInfo& info : all_ops()) {
    auto it = cases.find(std::string(info.name));
    ASSERT_NE(it, cases.end()) << "op '" << info.name
                               << "' has no conformance case; add one to op_cases()";
    if (has_ops_without_kernels()) {
      TestProgram alone{std::string(info.name)};
      it->second(alone);
      if (leaves_out("op " + std::string(info.name), alone.g)) continue;
    }
    it->second(p);
  }
  check(client(), p);
  // The same program with fusion, layout folding and memory planning off: every node its own
  // loop or kernel (layout ops as copy kernels).
  // Many small loops: the CPU's -O1 (cpu.opt_level) halves the compile.
  policy::PolicySources quick;
  quick.sets = {"compile_cache.mode=off", "cpu.opt_level=1"};
  backend::CompileOptions off =
      runtime::compile_options_for(policy::resolve_policy(quick), GetParam());
  off.passes.disabled = {"fuse", "fold_layout", "plan_memory", "canonicalize", "cse"};
  EXPECT_EQ(check(client(), p, off).size(), p.checks.size());
}

TEST_P(Conformance, GradientsMatchTheReference) {
  const auto cases = grad_cases();
  TestProgram p("grads", 7);
  NodeId loss = -1;
  for (const OpInfo& info : all_ops()) {
    if (!info.differentiable) continue;
    auto it = cases.find(std::string(info.name));
    ASSERT_NE(it, cases.end()) << "differentiable op '" << info.name << "' has no gradient case";
    if (has_ops_without_kernels()) {
      TestProgram alone{std::string(info.name), 7};
      alone.out(loss_term(alone, it->second(alone)), "loss");
      if (leaves_out("the gradient of " + std::string(info.name), value_and_gradients(alone))) {
        continue;
      }
    }
    const NodeId term = loss_term(p, it->second(p));
    loss = loss < 0 ? term : p.op(Op::add, {loss, term});
  }
  p.out(loss, "loss");
  std::vector<size_t> wrt;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (p.inputs[i].dtype() == DType::f32) wrt.push_back(i);
  }
  TestProgram vg("grads_vg");
  vg.g = value_and_gradients(p);
  vg.inputs = p.inputs;
  vg.checks.assign(vg.g.outputs().size(), {"", kLoose});
  for (size_t i = 0; i < vg.checks.size(); ++i) {
    vg.checks[i].first = i == 0 ? "loss" : fmt::format("gradient of input {}", wrt[i - 1]);
  }
  check(client(), vg);
}

TEST_P(Conformance, RandomGraphsMatchTheReference) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    TestProgram p(fmt::format("random_{}", seed), seed);
    std::mt19937_64 r(seed * 7919);
    for (int c = 0; c < 10; ++c) {
      RandomGraph rg(p, r);
      rg.grow(6 + static_cast<int>(r() % 8));
      for (NodeId id : rg.results(3))
        p.out(id, fmt::format("seed {} graph {} %{}", seed, c, id), kLoose);
    }
    check(client(), p);
    if (seed == 1) {  // and with every pass off
      backend::CompileOptions off;
      off.passes.disabled = {"canonicalize", "cse", "dce", "fuse", "plan_memory"};
      check(client(), p, off);
    }
  }
}

// Every finite-difference case in one program (each case's loss its own output) and its
// gradient in another, both compiled once on the backend; the backend's own gradient is then
// checked against central differences of the backend's own losses.
TEST_P(FiniteDifferences, GradientsMatchCentralDifferences) {
  std::vector<fd_test::FdCase> cases = fd_test::fd_cases();
  if (has_ops_without_kernels()) {
    std::erase_if(cases, [&](const fd_test::FdCase& c) {
      Graph one("fd_" + c.name);
      one.set_outputs({fd_test::add_fd_loss(one, c, 17)});
      return leaves_out("the finite-difference case " + c.name, one) ||
             leaves_out("the gradient of " + c.name, autodiff::grad(one));
    });
  }
  Graph all("fd_losses");
  std::vector<Array> inputs;
  std::vector<size_t> first_input;  // each case's first input
  std::vector<NodeId> losses_of;
  for (size_t c = 0; c < cases.size(); ++c) {
    const uint32_t seed = 17 + static_cast<uint32_t>(c);
    first_input.push_back(inputs.size());
    for (Array& a : fd_test::make_inputs(cases[c], seed)) inputs.push_back(std::move(a));
    losses_of.push_back(fd_test::add_fd_loss(all, cases[c], seed));
  }
  all.set_outputs(losses_of);
  Graph total = all;  // d(sum of every loss) = each case's gradient: the cases share no input
  NodeId sum = losses_of[0];
  for (size_t c = 1; c < cases.size(); ++c) sum = fd_test::E(total, Op::add, {sum, losses_of[c]});
  total.set_outputs({sum});
  const Graph grads = autodiff::grad(total);
  std::unique_ptr<backend::Executable> losses = client().compile(all, {});
  std::unique_ptr<backend::Executable> analytic_exe = client().compile(grads, {});
  auto run = [&](backend::Executable& exe, const std::vector<Array>& in) {
    std::vector<Array> out;
    for (backend::Buffer& b : exe.execute(buffers(client(), in))) out.push_back(host_value(b));
    return out;
  };
  const std::vector<Array> analytic = run(*analytic_exe, inputs);
  ASSERT_EQ(analytic.size(), inputs.size());
  const double eps = 1e-2;
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(cases[c].name);
    const size_t end = c + 1 < cases.size() ? first_input[c + 1] : inputs.size();
    double largest = 0;
    for (size_t p = first_input[c]; p < end; ++p) {
      for (int64_t i = 0; i < inputs[p].numel(); ++i) {
        std::vector<Array> hi = inputs, lo = inputs;
        hi[p] = inputs[p].clone();
        lo[p] = inputs[p].clone();
        hi[p].set_f64(i, inputs[p].get_f64(i) + eps);
        lo[p].set_f64(i, inputs[p].get_f64(i) - eps);
        const double numeric =
            (run(*losses, hi)[c].get_f64(0) - run(*losses, lo)[c].get_f64(0)) / (2 * eps);
        const double got = analytic[p].get_f64(i);
        const double tol = 1e-2 * std::max(std::abs(numeric), std::abs(got)) + 2e-3;
        EXPECT_NEAR(got, numeric, tol) << "input " << p - first_input[c] << " element " << i;
        largest = std::max(largest, std::abs(numeric));
      }
    }
    EXPECT_GT(largest, 1e-2) << "all gradients are ~0: the case checks nothing";
  }
}

std::string backend_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(backends_but_the_reference()),
                         backend_test_name);
INSTANTIATE_TEST_SUITE_P(Backends, FiniteDifferences,
                         ::testing::ValuesIn(registered_backend_names()), backend_test_name);

}  // namespace
}  // namespace keel

// As test_main.cpp's (a Runtime before any test), and --perf for the performance mode.
int main(int argc, char** argv) {
  keel::policy::PolicySources sources;
  sources.sets = {"launch.backend=ref", "compile_cache.mode=off", "shape_guard.mode=off"};
  keel::Runtime runtime(keel::policy::resolve_policy(sources));
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--perf") return keel::cpu_test::run_conformance_perf(argc, argv);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
