#include "backend/cuda/settings.h"

namespace keel::cuda {

std::string Settings::fingerprint() const {
  return product_addends ? "product_addends=1" : "product_addends=0";
}

std::shared_ptr<const Settings> settings_from(const policy::LaunchPolicy& p) {
  auto s = std::make_shared<Settings>();
  s->product_addends = p.boolean("cuda.product_addends");
  return s;
}

const Settings& settings_of(const backend::CompileOptions& options) {
  static const Settings defaults;
  const auto* s = dynamic_cast<const Settings*>(options.backend_settings.get());
  return s ? *s : defaults;
}

}  // namespace keel::cuda
