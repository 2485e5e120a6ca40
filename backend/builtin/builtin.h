#pragma once
// The backends built into keel, registered once: the rooms above call this and then know
// backends only by name (backend/registry.h).
namespace keel::backend {

/// Registers cpu and ref (once; later calls do nothing). Their policy keys are registered before
/// main: keel links this library whole.
void register_builtin_backends();

}  // namespace keel::backend
