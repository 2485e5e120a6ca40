#include "runtime/backends.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "backend/builtin/builtin.h"
#include "backend/registry.h"
#include "ir/error.h"
#include "policy/schema.h"

namespace keel {

std::vector<std::string> registered_backend_names() {
  backend::register_builtin_backends();
  return backend::backend_names();
}

std::vector<policy::Feature> backend_features(const policy::LaunchPolicy& p) {
  backend::register_builtin_backends();
  std::vector<policy::Feature> out;
  for (const std::string& name : backend::backend_names()) {
    const backend::BackendSpec& backend = backend::find_backend(name);
    std::string notes = backend.passes.empty()
                            ? std::string("runs the traced graph as it is")
                            : fmt::format("lowering: {}", fmt::join(backend.passes, ", "));
    const auto& groups = policy::policy_groups();  // a backend's own keys are its name's group
    if (std::find(groups.begin(), groups.end(), name) != groups.end()) {
      notes = fmt::format("settings: [{}]; {}", name, notes);
    }
    policy::Feature f{"backend." + name, true, fmt::format("{} ({})", backend.summary, notes),
                      "set launch.backend to an available backend"};
    try {
      backend.make_client(p);
    } catch (const Error& e) {
      f.available = false;
      f.why = e.what();
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<policy::Feature> feature_table(const policy::Bundle& bundle) {
  backend::register_builtin_backends();
  std::vector<policy::Feature> out;
  for (const std::string& name : backend::backend_names()) {
    const backend::BackendSpec& backend = backend::find_backend(name);
    if (backend.features) {
      for (policy::Feature& f : backend.features(bundle)) out.push_back(std::move(f));
    }
  }
  for (policy::Feature& f : policy::general_features()) out.push_back(std::move(f));
  return out;
}

void check_backend_keys(const policy::LaunchPolicy& policy, const policy::Bundle& bundle) {
  backend::register_builtin_backends();
  for (const std::string& name : backend::backend_names()) {
    const backend::BackendSpec& backend = backend::find_backend(name);
    if (backend.check_launch) backend.check_launch(policy, bundle);
  }
}

}  // namespace keel
