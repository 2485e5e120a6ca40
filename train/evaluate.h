#pragma once
// Validation through the eval program: the same rows every evaluation and every run (a fixed
// seed, not the run's, picks them from all over the validation text).
#include <cstdint>
#include <vector>

#include "data/corpus.h"
#include "train/step.h"
#include "train/trainer.h"

namespace keel::train {

// Mean loss per live target over `batches` batches of the model's shape; the host reads the
// program's sums here and only here.
EvalLog evaluate(const nn::GptConfig& model, const EvalFn& eval_fn, const Params& params,
                 const std::vector<data::Document>& docs, int64_t batches, int64_t step);

}  // namespace keel::train
