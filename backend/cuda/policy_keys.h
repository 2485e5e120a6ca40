#pragma once
// The CUDA backend's own settings (the cuda.* group of the launch policy), which it registers.
#include "policy/schema.h"

namespace keel::cuda {

/// launch.backend = cuda and the cuda.* keys: the toolkit's folder and the architecture kernels
/// are compiled for.
policy::BackendKeys policy_keys();

}  // namespace keel::cuda
