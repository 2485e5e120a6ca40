#pragma once
// What the CUDA tests check with: text containing a part, and a program's outputs on an
// executable against the reference interpreter's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "backend/backend.h"
#include "backend/ref/interpreter.h"
#include "tests/backend_cpu_cases.h"

namespace keel::cuda_test {

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs `exe` on p's inputs and compares each output with the reference interpreter's.
inline void expect_matches(backend::Client& client, backend::Executable& exe,
                           const cpu_test::TestProgram& p) {
  const std::vector<Array> want = ref::interpret(p.g, p.inputs);
  const std::vector<backend::Buffer> got = exe.execute(cpu_test::buffers(client, p.inputs));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& [name, tol] = p.checks.at(i);
    EXPECT_EQ(cpu_test::difference(cpu_test::host_value(got[i]), want[i], tol), "")
        << p.g.name() << ": " << name;
  }
}

// `p` with a loss summing each case's output times a random weight, then its value and the
// gradient of every f32 input (as the conformance suite's gradient test builds it).
inline cpu_test::TestProgram with_gradients(cpu_test::TestProgram& p,
                                            const std::vector<NodeId>& ys) {
  NodeId loss = -1;
  for (NodeId y : ys) {
    cpu_test::Ints axes(p.g.node(y).type.shape.size());
    for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
    const NodeId term =
        p.op(Op::reduce_sum, {p.op(Op::mul, {y, p.random(DType::f32, p.g.node(y).type.shape)})},
             cpu_test::reduce_attrs(axes, 0));
    loss = loss < 0 ? term : p.op(Op::add, {loss, term});
  }
  p.out(loss, "loss");
  std::vector<size_t> wrt;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (p.inputs[i].dtype() == DType::f32) wrt.push_back(i);
  }
  cpu_test::TestProgram vg(p.g.name() + "_vg");
  vg.g = autodiff::value_and_grad(p.g, 0, wrt);
  vg.inputs = p.inputs;
  vg.checks.assign(vg.g.outputs().size(), {"", cpu_test::kLoose});
  for (size_t i = 0; i < vg.checks.size(); ++i) {
    vg.checks[i].first = i == 0 ? "loss" : fmt::format("gradient of input {}", wrt[i - 1]);
  }
  return vg;
}

}  // namespace keel::cuda_test
