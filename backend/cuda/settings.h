#pragma once
// The CUDA backend's own compile settings, from its policy group (cuda.*), carried to its
// client opaquely through backend::CompileOptions.
#include <memory>
#include <string>

#include "backend/backend.h"
#include "policy/launch_policy.h"

namespace keel::cuda {

struct Settings final : backend::BackendSettings {
  // A product read only by an add adds the other operand itself (cuda.product_addends); false:
  // the add is a kernel of its own, should cuBLASLt refuse an addend on some device.
  bool product_addends = true;
  // The GELU after a product, and its gradient after the backward's product, are cuBLASLt's
  // GELU epilogues (cuda.gelu_epilogues); false: kernels of their own.
  bool gelu_epilogues = true;
  std::string fingerprint() const override;
};

// The settings of a launch's cuda.* keys.
std::shared_ptr<const Settings> settings_from(const policy::LaunchPolicy& p);
// `options`' settings, or the defaults when it carries none (or another backend's).
const Settings& settings_of(const backend::CompileOptions& options);

}  // namespace keel::cuda
