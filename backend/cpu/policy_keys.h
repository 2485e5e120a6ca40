#pragma once
// The CPU backend's own settings (the cpu.* group of the launch policy), which it registers.
#include "policy/schema.h"

namespace keel::cpu {

/// launch.backend = cpu and the cpu.* keys: compiler, flags, optimisation level, BLAS, matmul
/// precision, compile deadline.
policy::BackendKeys policy_keys();

}  // namespace keel::cpu
