#pragma once
// A JIT on the compiled CPU backend whose cache and run directory live under a test's temp dir,
// for tests that check a program on the real backend against the reference interpreter.
#include <memory>

#include "backend/cpu/client.h"
#include "runtime/jit.h"
#include "temp_dir.h"

namespace keel::testing_support {

inline std::shared_ptr<runtime::CachedJit> cpu_jit(const TempDir& dir) {
  runtime::JitConfig jc;
  jc.client = cpu::make_cpu_client();
  jc.cache.dir = dir / "cache";
  jc.run_dir = dir / "run";
  return std::make_shared<runtime::CachedJit>(jc);
}

}  // namespace keel::testing_support
