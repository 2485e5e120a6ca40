#pragma once
// The client of a registered backend, made as a launch that names it would make it (no disk
// cache), once per process: for the conformance suite and its performance mode.
#include <map>
#include <memory>
#include <string>

#include "backend/registry.h"
#include "policy/resolve.h"

namespace keel::cpu_test {

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
