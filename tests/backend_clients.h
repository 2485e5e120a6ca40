#pragma once
// The client of a registered backend, made as a launch that names it would make it (no disk
// cache), once per process: for the conformance suite and its performance mode.
#include <map>
#include <memory>
#include <string>

#include "backend/registry.h"
#include "policy/resolve.h"

namespace keel::cpu_test {

// Why `name` cannot run on this machine ("no CUDA device: ..."), or empty.
inline std::string unavailable_here(const std::string& name) {
  const backend::BackendSpec& spec = backend::find_backend(name);
  return spec.unavailable_here ? spec.unavailable_here() : std::string();
}

inline backend::Client& client_of(const std::string& name) {
  static std::map<std::string, std::shared_ptr<backend::Client>> clients;
  auto& c = clients[name];
  if (!c) {
    policy::PolicySources s;
    s.sets = {"launch.backend=" + name, "compile_cache.mode=off"};
    c = backend::find_backend(name).make_client(policy::resolve_policy(s));
  }
  return *c;
}

}  // namespace keel::cpu_test
