#pragma once
// Central differences of a loss against its analytic gradient, at a few entries (first, a few
// inside, last) of each named parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "nn/gpt.h"

namespace keel::testing_support {

// loss_of(params) -> double; grads: the analytic gradient at `p`.
template <class LossOf>
void expect_gradients_match_fd(const NamedTensors& p, const NamedTensors& grads,
                               const std::vector<std::string>& names, LossOf loss_of,
                               double abs_tol, double rel_tol) {
  for (const std::string& name : names) {
    Array base = p.at(name).array();
    std::set<int64_t> entries;  // within the parameter: a small one has fewer than four
    for (int64_t i : {int64_t{0}, int64_t{5}, base.numel() / 2 + 1, base.numel() - 1}) {
      if (i < base.numel()) entries.insert(i);
    }
    for (int64_t i : entries) {
      const double eps = 1e-2;
      auto at = [&](double delta) {
        Array a = base.clone();
        a.set_f64(i, a.get_f64(i) + delta);
        NamedTensors q = p;
        q[name] = Tensor(a);
        return loss_of(q);
      };
      const double fd = (at(eps) - at(-eps)) / (2 * eps);
      const double an = grads.at(name).array().get_f64(i);
      EXPECT_NEAR(an, fd, abs_tol + rel_tol * std::abs(fd)) << name << "[" << i << "]";
    }
  }
}

}  // namespace keel::testing_support
