// One process of the multi-process runtime tests: runs the tiny LM for a few steps through the
// JIT (cache + compile log) and prints its losses exactly.
// Usage: runtime_worker PLATFORM CACHE_DIR RUN_DIR STEPS   (PLATFORM: cpu | ref)
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "train/tiny_lm.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: runtime_worker cpu|ref CACHE_DIR RUN_DIR STEPS\n");
    return 2;
  }
  try {
    keel::policy::PolicySources sources;
    sources.sets = {std::string("launch.backend=") + argv[1],
                    std::string("compile_cache.dir=") + argv[2], "shape_guard.mode=off"};
    keel::Runtime runtime(keel::policy::resolve_policy(sources), {argv[3], nullptr});
    keel::runtime::CachedJit* jit = &runtime.jit();
    keel::TinyLmConfig c;
    c.steps = std::atoi(argv[4]);
    c.batch = 16;
    keel::TinyLmRun run = keel::run_tiny_lm(c, keel::tiny_lm_default_text());
    for (double l : run.losses) std::printf("loss %a\n", l);
    keel::diag::CompileTotals n = jit->log().totals();
    std::printf("compiles %lld disk_hits %lld memory_hits %lld\n",
                static_cast<long long>(n.compiles), static_cast<long long>(n.disk_hits),
                static_cast<long long>(n.memory_hits));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
