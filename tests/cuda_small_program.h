#pragma once
// The CUDA tests' small program: tanh(x w) summed by row, and x itself as an output, so one
// program holds a cuBLASLt product, a reduction kernel and an output copy.
#include <string>

#include "tests/backend_cpu_cases.h"

namespace keel::cuda_test {

inline cpu_test::TestProgram product_reduce_copy(const std::string& name) {
  using Ints = std::vector<int64_t>;
  cpu_test::TestProgram p(name);
  const NodeId x = p.random(DType::f32, {6, 8}), w = p.random(DType::f32, {8, 5});
  const NodeId y = p.op(Op::dot_general, {x, w},
                        {{"lhs_batch", Ints{}},
                         {"rhs_batch", Ints{}},
                         {"lhs_contract", Ints{1}},
                         {"rhs_contract", Ints{0}}});
  p.out(p.op(Op::reduce_sum, {p.op(Op::tanh, {y})}, cpu_test::reduce_attrs({1}, 0)), "sums");
  p.out(x, "a parameter as output: a copy");
  return p;
}

}  // namespace keel::cuda_test
