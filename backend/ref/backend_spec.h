#pragma once
// The reference interpreter as the registry knows it: every op in plain loops, nothing to
// install; the oracle every other backend is checked against.
#include "backend/registry.h"

namespace keel::ref {

backend::BackendSpec backend_spec();
/// launch.backend = ref; it has no settings of its own.
policy::BackendKeys policy_keys();

}  // namespace keel::ref
