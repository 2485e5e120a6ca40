#include "train/gpt_step.h"

#include "autodiff/value_and_grad.h"
#include "optim/adamw.h"

namespace keel::train {

StepFn make_gpt_train_step(const nn::GptConfig& config) {
  return StepFn(
      "train_step",
      [config](const Params& p, const Params& m, const Params& v, const Tensor& tokens,
               const Tensor& targets, const Tensor& mask, const std::vector<Scalar>& s) {
        auto loss_fn = [&config](const Params& q, const Tensor& x, const Tensor& y,
                                 const Tensor& w) { return nn::gpt_loss(config, q, x, y, w); };
        auto [loss, grads] = value_and_grad(loss_fn)(p, tokens, targets, mask);
        optim::AdamWResult next =
            optim::adamw_update(p, grads, m, v, {s[0], s[1], s[2], s[3], s[4], s[5]});
        return StepResult{loss, next.params, next.m, next.v};
      },
      {}, SourceLoc::current());
}

InitFn make_gpt_init(const nn::GptConfig& config) {
  return InitFn(
      "init", [config](const Scalar& seed) { return nn::gpt_init(config, cast(seed, DType::i64)); },
      {}, SourceLoc::current());
}

Params zeros_like_params(const nn::GptConfig& config) {
  Params out;
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
