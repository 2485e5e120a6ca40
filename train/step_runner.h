#pragma once
// The step the trainer runs, over the TrainState's Variables: one program
// (train/step.h), or the step split at layer barriers (train/segmented_step.h). Either way the
// new parameters, moments and counters are written into the state's storage.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/segmented_step.h"
#include "train/step.h"
#include "train/train_state.h"

namespace keel::train {

struct StepResult {
  Tensor loss, grad_norm, lr;
  Counters metrics;  // "mtp_loss.D", "moe.aux_loss", "indexer_kl"
};

class StepRunner {
 public:
  // model.layout.split_every > 0 (launch.layer_layout = split:N): the split step. Stacked state
  // needs the one-program step.
  explicit StepRunner(const nn::GptConfig& model, StepOptions options = {});

  // Traces and compiles (or loads) every program a step runs, running none.
  void prepare(const TrainState& state, const std::vector<Tensor>& batch,
               const std::vector<Scalar>& scalars) const;
  // One step; the state's Variables hold the new values afterwards. A step that throws while a
  // program runs may have written part of the state: its contents are then unspecified.
  StepResult run(TrainState& state, const std::vector<Tensor>& batch,
                 const std::vector<Scalar>& scalars) const;

  // The split step, when there is one.
  const SegmentedStep* split() const { return split_ ? &*split_ : nullptr; }

 private:
  TrainStepFn one_;
  std::optional<SegmentedStep> split_;
};

}  // namespace keel::train
