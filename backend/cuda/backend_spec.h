#pragma once
// The CUDA backend as the registry knows it: its installation checks (driver and device,
// NVRTC, cuBLASLt, cuDNN), its share of the bundle, and why it cannot run on this machine.
#include <string>

#include "backend/registry.h"

namespace keel::cuda {

backend::BackendSpec backend_spec();

// The architecture programs are compiled for: cuda.arch, or the first device's for "native".
// Throws keel::InputError naming the key when it is not sm_NN, or is native with no device.
std::string target_arch(const policy::LaunchPolicy& p);

}  // namespace keel::cuda
