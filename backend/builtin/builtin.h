#pragma once
// The backends built into keel, registered once: the rooms above call this and then know
// backends only by name (backend/registry.h).
namespace keel::backend {

/// Registers cpu and ref (once; later calls do nothing). Their launch-policy keys (cpu.*) and
/// names (launch.backend) are registered while the program starts: keel links this library
/// whole, so every program has them before it resolves a policy.
void register_builtin_backends();

}  // namespace keel::backend
