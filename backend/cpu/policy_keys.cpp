#include "backend/cpu/policy_keys.h"

#include <fmt/format.h>

#ifndef KEEL_DEFAULT_BLAS
#define KEEL_DEFAULT_BLAS "libopenblas.so.0"
#endif

namespace keel::cpu {

policy::BackendKeys policy_keys() {
  using policy::Kind;
  using Strings = std::vector<std::string>;
  policy::BackendKeys b{"cpu", "compiled C++", {}, {}, {"openmp", "blas", "bf16_matmul"}};
  policy::KeySpec compiler =
      policy::make_key("cpu", "compiler", Kind::string, std::string("c++"),
                       "the C++ compiler for generated code (name on PATH or path)");
  compiler.codegen = true;
  b.keys.push_back(compiler);
  // g++ and clang otherwise keep loops at 256 bits on AVX-512 hosts; 512 made the gpt2-s bf16
  // step 3 % faster on an AMX host (a no-op where the CPU has no AVX-512).
  policy::KeySpec flags =
      policy::make_key("cpu", "flags", Kind::string_list,
                       Strings{"-march=native", "-mprefer-vector-width=512", "-fopenmp"},
                       "compiler flags besides the optimisation level");
  flags.codegen = true;
  b.keys.push_back(flags);
  policy::KeySpec opt =
      policy::make_integer("cpu", "opt_level", 2, 0, 3, "-O level of generated code");
  opt.codegen = true;
  b.keys.push_back(opt);
  policy::KeySpec blas =
      policy::make_key("cpu", "blas", Kind::string, std::string(KEEL_DEFAULT_BLAS),
                       "the BLAS shared library GEMMs run on (loaded at init)");
  blas.codegen = true;
  b.keys.push_back(blas);
  policy::KeySpec precision = policy::make_choice(
      "cpu", "matmul_precision", "f32", {"f32", "bf16"},
      "f32 matmuls: f32, or bf16 operands (rounded to nearest even) with f32 accumulation and "
      "results; needs bf16_matmul (keel features)");
  precision.codegen = true;
  b.keys.push_back(precision);
  // A deadline changes no generated code: not a codegen key, so not in the cache key.
  b.keys.push_back(
      policy::make_integer("cpu", "compile_timeout_s", 600, 1, 604800,
                           "seconds the compiler may run before it and its children are killed"));
  // The group was codegen.* before each backend owned its own (the passes' keys are passes.*).
  for (const char* key :
       {"compiler", "flags", "opt_level", "blas", "matmul_precision", "compile_timeout_s"}) {
    b.renamed[fmt::format("codegen.{}", key)] = fmt::format("cpu.{}", key);
  }
  return b;
}

}  // namespace keel::cpu
