#include "optim/adamw.h"

namespace keel::optim {

bool default_decays(const std::string& name, const Shape& shape) {
  // Parameters stored stacked for a scanned layer stack (scan.*) carry a leading layer axis.
  const auto rank = static_cast<int64_t>(shape.size()) - (name.starts_with("scan.") ? 1 : 0);
  // Embedding tables (the token and position tables, n-gram memories) are not decayed.
  return rank >= 2 && name.rfind("wte", 0) != 0 && name.rfind("wpe", 0) != 0 &&
         !name.ends_with(".engram.table");
}

bool default_decays(const std::string& name, const Tensor& param) {
  return default_decays(name, param.shape());
}

AdamWResult adamw_update(const NamedTensors& params, const NamedTensors& grads,
                         const NamedTensors& m, const NamedTensors& v, const AdamWScalars& s) {
  std::set<std::string> decayed;
  for (const auto& [name, p] : params) {
    if (default_decays(name, p)) decayed.insert(name);
  }
  return adamw_update(params, grads, m, v, s, decayed);
}

AdamWResult adamw_update(const NamedTensors& params, const NamedTensors& grads,
                         const NamedTensors& m, const NamedTensors& v, const AdamWScalars& s,
                         const std::set<std::string>& decayed) {
  // Bias corrections are computed once per step on the device, from the step tensor.
  Tensor one = full({}, 1.0);
  Tensor bc1 = one - pow(s.beta1, s.step);
  Tensor bc2 = one - pow(s.beta2, s.step);
  Tensor step_size = s.lr / bc1;
  Tensor inv_sqrt_bc2 = rsqrt(bc2);
  Tensor keep = one - s.lr * s.weight_decay;
  AdamWResult out;
  for (const auto& [name, p] : params) {
    const Tensor& g = grads.at(name);
    Tensor m1 = s.beta1 * m.at(name) + (one - s.beta1) * g;
    Tensor v1 = s.beta2 * v.at(name) + (one - s.beta2) * g * g;
    Tensor denom = sqrt(v1) * inv_sqrt_bc2 + s.eps;
    Tensor base = decayed.count(name) ? p * keep : p;
    out.params[name] = base - step_size * m1 / denom;
    out.m[name] = m1;
    out.v[name] = v1;
  }
  return out;
}

}  // namespace keel::optim
