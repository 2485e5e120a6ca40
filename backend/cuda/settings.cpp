#include "backend/cuda/settings.h"

#include <fmt/format.h>

namespace keel::cuda {

std::string Settings::fingerprint() const {
  return fmt::format("product_addends={} gelu_epilogues={}", product_addends ? 1 : 0,
                     gelu_epilogues ? 1 : 0);
}

std::shared_ptr<const Settings> settings_from(const policy::LaunchPolicy& p) {
  auto s = std::make_shared<Settings>();
  s->product_addends = p.boolean("cuda.product_addends");
  s->gelu_epilogues = p.boolean("cuda.gelu_epilogues");
  return s;
}

const Settings& settings_of(const backend::CompileOptions& options) {
  static const Settings defaults;
  const auto* s = dynamic_cast<const Settings*>(options.backend_settings.get());
  return s ? *s : defaults;
}

}  // namespace keel::cuda
