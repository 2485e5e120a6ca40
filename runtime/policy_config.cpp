#include "runtime/policy_config.h"

#include <fmt/format.h>

#include "backend/builtin/builtin.h"
#include "backend/registry.h"
#include "files/host.h"
#include "ir/error.h"

namespace keel::runtime {

backend::CompileOptions compile_options_for(const policy::LaunchPolicy& p,
                                            const std::string& backend) {
  backend::CompileOptions o;
  for (const std::string& pass : p.strings("passes.disable")) o.passes.disabled.insert(pass);
  if (p.boolean("passes.dump")) o.passes.dump_dir = p.string("diag.dump_dir") + "/passes";
  backend::register_builtin_backends();
  const backend::BackendSpec& spec = backend::find_backend(backend);
  if (spec.configure_compile) spec.configure_compile(p, o);
  return o;
}

backend::CompileOptions compile_options_from(const policy::LaunchPolicy& p) {
  return compile_options_for(p, p.string("launch.backend"));
}

std::string cache_dir_of(const policy::LaunchPolicy& p, const std::string& host) {
  std::string dir = p.string("compile_cache.dir");
  for (size_t at = dir.find("{host}"); at != std::string::npos; at = dir.find("{host}", at)) {
    dir.replace(at, 6, host);
    at += host.size();
  }
  return dir;
}

cache::CacheConfig cache_config_from(const policy::LaunchPolicy& p) {
  cache::CacheConfig c;
  c.host = files::host_name();
  c.dir = cache_dir_of(p, c.host);
  c.mode = *cache::parse_mode(p.string("compile_cache.mode"));
  c.sharing = *cache::parse_sharing(p.string("compile_cache.layout"));
  if (c.sharing == cache::Sharing::shared &&
      p.string("compile_cache.dir").find("{host}") != std::string::npos) {
    throw InputError(fmt::format(
        "[policy] compile_cache.layout = shared but compile_cache.dir '{}' names a directory per "
        "host ({{host}}); drop {{host}} for one directory every host sees, or use "
        "compile_cache.layout = per_host",
        p.string("compile_cache.dir")));
  }
  c.max_bytes = p.integer("compile_cache.max_bytes");
  c.unsafe_dir_is_error = p.string("compile_cache.unsafe_dir") == "error";
  c.forbid_compile = p.boolean("compile_cache.forbid_compile");
  c.lock_timeout_s = static_cast<double>(p.integer("compile_cache.lock_timeout_s"));
  c.signatures = *cache::parse_signatures(p.string("compile_cache.signatures"));
  c.trusted_keys = p.strings("compile_cache.trusted_keys");
  c.signing_key = p.string("compile_cache.signing_key");
  return c;
}

ShapeGuardConfig guard_config_from(const policy::LaunchPolicy& p) {
  ShapeGuardConfig g;
  g.mode = *parse_guard_mode(p.string("shape_guard.mode"));
  g.warmup_steps = p.integer("shape_guard.warmup_steps");
  g.max_programs_per_function = p.integer("shape_guard.max_programs_per_function");
  return g;
}

}  // namespace keel::runtime
