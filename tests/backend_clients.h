#pragma once
// The client of a registered backend, made as a launch that names it would make it (no disk
// cache), once per process: for the conformance suite and its performance mode.
#include <map>
#include <memory>
#include <set>
#include <string>

#include "backend/registry.h"
#include "ir/graph.h"
#include "policy/resolve.h"

namespace keel::cpu_test {

// The launch of `name` the suites run: no disk cache; KEEL_* variables count
// (KEEL_CUDA_EMULATE=true runs the cuda backend's cases on its emulated GPU).
inline policy::LaunchPolicy launch_of(const std::string& name) {
  policy::PolicySources s;
  s.sets = {"launch.backend=" + name, "compile_cache.mode=off"};
  s.environment = policy::keel_environment();
  return policy::resolve_policy(s);
}

// Why `name` cannot run on this machine ("no CUDA device: ..."), or empty.
inline std::string unavailable_here(const std::string& name) {
  const backend::BackendSpec& spec = backend::find_backend(name);
  return spec.unavailable_here ? spec.unavailable_here(launch_of(name)) : std::string();
}

// Whether `g` holds an op `name`'s programs cannot hold yet (BackendSpec::ops_without_kernels);
// then the op's name, else empty.
inline std::string op_without_kernel(const std::string& name, const Graph& g) {
  const std::set<std::string>& without = backend::find_backend(name).ops_without_kernels;
  for (const Node& n : g.nodes()) {
    if (without.count(std::string(op_name(n.op)))) return std::string(op_name(n.op));
  }
  return "";
}

inline backend::Client& client_of(const std::string& name) {
  static std::map<std::string, std::shared_ptr<backend::Client>> clients;
  auto& c = clients[name];
  if (!c) {
    c = backend::find_backend(name).make_client(launch_of(name));
  }
  return *c;
}

}  // namespace keel::cpu_test
