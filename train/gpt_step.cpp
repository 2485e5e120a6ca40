#include "train/gpt_step.h"

namespace keel::train {

InitFn make_gpt_init(const nn::GptConfig& config) {
  return InitFn(
      "init", [config](const Scalar& seed) { return nn::gpt_init(config, cast(seed, DType::i64)); },
      {}, SourceLoc::current());
}

NamedTensors zeros_like_params(const nn::GptConfig& config) {
  NamedTensors out;
  for (const auto& [name, shape] : nn::gpt_param_shapes(config)) {
    out[name] = Tensor(Array(DType::f32, shape));
  }
  return out;
}

std::vector<Scalar> adamw_scalars(double lr, int64_t step, double beta1, double beta2, double eps,
                                  double weight_decay) {
  return {Scalar(lr),  Scalar(beta1),        Scalar(beta2),
          Scalar(eps), Scalar(weight_decay), Scalar(static_cast<double>(step))};
}

}  // namespace keel::train
