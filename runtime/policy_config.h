#pragma once
// The launch policy, translated into the configuration each room takes. The only place policy
// keys are read for the JIT, the cache and the shape guard.
#include "backend/backend.h"
#include "cache/cache.h"
#include "diag/shape_guard.h"
#include "policy/launch_policy.h"

namespace keel::runtime {

// codegen.compiler, -O<codegen.opt_level> + codegen.flags, codegen.disable_passes,
// diag.dump_dir/passes when codegen.dump_passes, codegen.compile_timeout_s and
// codegen.matmul_precision.
backend::CompileOptions compile_options_from(const policy::LaunchPolicy& p);
// compile_cache.*; "{host}" in compile_cache.dir becomes this host's name, so one path can
// name a directory per host on storage every host sees.
cache::CacheConfig cache_config_from(const policy::LaunchPolicy& p);
diag::ShapeGuardConfig guard_config_from(const policy::LaunchPolicy& p);

}  // namespace keel::runtime
