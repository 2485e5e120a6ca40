#pragma once
// C++ code generation for the CPU backend: one source file per program that follows the fusion
// and memory plans of cpu::lower and calls libkeel only through the kernel table (abi.h).
#include <cstdint>
#include <string>

#include "passes/pipeline.h"

namespace keel::cpu {

// Codegen choices baked into the generated calls (so they are part of the program and, through
// CompileOptions::fingerprint, of its cache key).
struct CodegenOptions {
  int32_t matmul_precision = 0;  // KEEL_MATMUL_F32 or KEEL_MATMUL_BF16 (abi.h)
};

struct GeneratedSource {
  std::string text;
  int64_t arena_bytes = 0;  // the planned arena plus codegen's own scratch after it
  // The plan's prediction plus that scratch plus the largest kernel call's own temporaries.
  int64_t predicted_peak_bytes = 0;
};

// Throws keel::Error "[backend.cpu] ..." for a program the ABI cannot express (rank > 8 at a
// kernel), a plan that breaks its contract, plans made for another target than the CPU's, or a
// scan without its lowered body.
GeneratedSource generate_source(const passes::Lowered& lowered, const CodegenOptions& options = {});

// The ABI header text (backend/cpu/abi.h), embedded so generated code needs no include path.
extern const char* const kAbiHeaderText;

}  // namespace keel::cpu
