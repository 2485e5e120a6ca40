#pragma once
// What the CUDA tests check with: text containing a part, and a program's outputs on an
// executable against the reference interpreter's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

}  // namespace keel::cuda_test
