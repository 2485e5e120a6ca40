#pragma once
// The launch policy, translated into the configuration each room takes. The only place policy
// keys are read for the JIT, the cache and the shape guard.
#include "backend/backend.h"
#include "cache/cache.h"
#include "policy/launch_policy.h"
#include "runtime/shape_guard.h"

namespace keel::runtime {

// cpu.compiler, -O<cpu.opt_level> + cpu.flags, passes.disable,
// diag.dump_dir/passes when passes.dump, cpu.compile_timeout_s and
// cpu.matmul_precision.
backend::CompileOptions compile_options_from(const policy::LaunchPolicy& p);
// compile_cache.*; "{host}" in compile_cache.dir becomes this host's name, so one path can
// name a directory per host on storage every host sees.
cache::CacheConfig cache_config_from(const policy::LaunchPolicy& p);
ShapeGuardConfig guard_config_from(const policy::LaunchPolicy& p);

}  // namespace keel::runtime
