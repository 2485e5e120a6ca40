#pragma once
// The CPU backend's optional features and launch checks, judged from a launch's bundle (the
// host's ISA, the BLAS and oneDNN the backend loaded, OpenMP).
#include <string>
#include <vector>

#include "policy/bundle.h"
#include "policy/features.h"
#include "policy/launch_policy.h"

namespace keel::cpu {

/// bf16_matmul from the host's ISA flags (bundle host.cpu_features) and the oneDNN the backend
/// loaded (bundle field onednn: "oneDNN 2.6.3 (isa avx512_core_bf16)", "" when absent).
policy::Feature bf16_matmul_feature(const std::string& cpu_features, const std::string& onednn);
/// openmp, blas and bf16_matmul, judged from `bundle`.
std::vector<policy::Feature> features(const policy::Bundle& bundle);
/// keel::InputError when cpu.matmul_precision = bf16 cannot run: another launch.backend, or no
/// native bf16 products here; the message names the key's origin and the fix.
void check_launch(const policy::LaunchPolicy& p, const policy::Bundle& bundle);

}  // namespace keel::cpu
