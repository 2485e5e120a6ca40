// The main of every unit test binary that creates tensors: the startup contract holds in tests
// too, so a Runtime (reference backend, no disk cache) exists before any test runs.
#include <gtest/gtest.h>

#include "policy/resolve.h"
#include "runtime/runtime.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  keel::policy::PolicySources sources;
  sources.sets = {"launch.backend=ref", "compile_cache.mode=off", "shape_guard.mode=off"};
  keel::Runtime runtime(keel::policy::resolve_policy(sources));
  return RUN_ALL_TESTS();
}
