#pragma once
// The CUDA backend's own settings (the cuda.* group of the launch policy), which it registers.
#include "policy/schema.h"

namespace keel::cuda {

/// launch.backend = cuda and the cuda.* keys: the toolkit's folder, the architecture kernels
/// are compiled for, the products' precision, and whether programs run on the emulated GPU.
policy::BackendKeys policy_keys();

}  // namespace keel::cuda
