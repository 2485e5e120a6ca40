#pragma once
// The launch policy, translated into the configuration each room takes. The only place policy
// keys are read for the JIT, the cache and the shape guard.
#include "backend/backend.h"
#include "cache/cache.h"
#include "policy/launch_policy.h"
#include "runtime/shape_guard.h"

namespace keel::runtime {

// passes.disable and diag.dump_dir/passes when passes.dump, then what the backend named
// `backend` adds from its own group (BackendSpec::configure_compile; the CPU's cpu.* keys).
backend::CompileOptions compile_options_for(const policy::LaunchPolicy& p,
                                            const std::string& backend);
// compile_options_for the launch's backend (launch.backend).
backend::CompileOptions compile_options_from(const policy::LaunchPolicy& p);
// compile_cache.*; "{host}" in compile_cache.dir becomes this host's name, so one path can
// name a directory per host on storage every host sees.
cache::CacheConfig cache_config_from(const policy::LaunchPolicy& p);
ShapeGuardConfig guard_config_from(const policy::LaunchPolicy& p);

}  // namespace keel::runtime
