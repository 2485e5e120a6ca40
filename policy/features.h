#pragma once
// Optional features and whether this build on this machine has them. Asking for one that is
// unavailable warns and falls back, or is an error, per features.on_unavailable; it is never
// silently ignored.
#include <string>
#include <vector>

#include "policy/bundle.h"

namespace keel::policy {

struct Feature {
  std::string name;
  bool available = false;
  std::string why;       // what makes it available, or what is missing and how to get it
  std::string fallback;  // what runs instead when unavailable
};

// bf16_matmul from the CPU's ISA flags (bundle cpu.features) and the oneDNN the backend loaded
// (bundle field onednn: "oneDNN 2.6.3 (isa avx512_core_bf16)", "" when absent).
Feature bf16_matmul_feature(const std::string& cpu_features, const std::string& onednn);
// Every optional feature, judged from the bundle (CPU ISA, BLAS, OpenMP) and the build.
std::vector<Feature> feature_table(const Bundle& bundle);
// keel::InputError naming the known features when `name` is not one.
Feature find_feature(const Bundle& bundle, const std::string& name);

}  // namespace keel::policy
