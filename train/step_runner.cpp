#include "train/step_runner.h"

namespace keel::train {

StepRunner::StepRunner(const nn::GptConfig& model, StepOptions options)
    : one_(make_train_step(model, options)) {
  if (model.layout.split_every > 0) split_.emplace(model, options);
}

void StepRunner::prepare(const TrainState& s, const std::vector<Tensor>& batch,
                         const std::vector<Scalar>& scalars) const {
  if (split_) {
    split_->prepare(s.params.tensors(), s.m.tensors(), s.v.tensors(), s.counters.tensors(), batch,
                    scalars);
  } else {
    one_.prepare(s.params.tensors(), s.m.tensors(), s.v.tensors(), s.counters.tensors(), batch,
                 scalars);
  }
}

StepResult StepRunner::run(TrainState& s, const std::vector<Tensor>& batch,
                           const std::vector<Scalar>& scalars) const {
  const NamedTensors p = s.params.tensors(), m = s.m.tensors(), v = s.v.tensors();
  const Counters c = s.counters.tensors();
  auto [loss, norm, lr, p2, m2, v2, c2, metrics] =
      split_ ? (*split_)(p, m, v, c, batch, scalars) : one_(p, m, v, c, batch, scalars);
  s.params.update(p2);
  s.m.update(m2);
  s.v.update(v2);
  s.counters.update(c2);
  return {loss, norm, lr, metrics};
}

}  // namespace keel::train
