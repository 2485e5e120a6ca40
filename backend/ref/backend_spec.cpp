#include "backend/ref/backend_spec.h"

#include "backend/ref/client.h"

namespace keel::ref {

backend::BackendSpec backend_spec() {
  backend::BackendSpec s;
  s.name = "ref";
  s.summary = "the reference interpreter: every op in plain loops, the oracle of the tests";
  s.make_client = [](const policy::LaunchPolicy&) { return make_ref_client(); };
  s.bundle_part = [](const policy::LaunchPolicy&, const backend::CompileOptions& o) {
    return backend::BundlePart{{}, make_ref_client()->toolchain(o)};
  };
  s.installation_checks = [](const policy::LaunchPolicy&) { return std::vector<backend::Check>{}; };
  return s;
}

policy::BackendKeys policy_keys() {
  return {"ref", "the reference interpreter", {}, {}, {}};
}

}  // namespace keel::ref
