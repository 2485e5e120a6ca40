#pragma once
// The training state as Variables (nn/variables.h): parameters, AdamW's moments and the device
// counters, long-lived buffers every step writes in place. A scanned layer stack stores its
// layers' tensors stacked (nn/layer_stack.h); checkpoints are always per layer. A new run fills
// the state with the init program; a resume allocates it and copies a checkpoint in, so the init
// program never runs.
#include <cstdint>
#include <map>
#include <string>

#include "nn/gpt.h"
#include "nn/variables.h"
#include "train/checkpoint.h"
#include "train/gpt_step.h"

namespace keel::train {

struct TrainState {
  nn::Variables params, m, v, counters;
  bool stacked = false;  // scanned layers' tensors stored [layers, ...]
};

// The init program's parameters (seeded), zero moments and counters.
TrainState initial_state(const nn::GptConfig& model, bool stacked, const InitFn& init,
                         uint64_t seed);
// Storage for every tensor, contents unspecified, counters zero: for a checkpoint to fill.
TrainState allocated_state(const nn::GptConfig& model, bool stacked);

// Per-layer parameters and moments ("<name>.exp_avg", "<name>.exp_avg_sq") to write.
void state_to_checkpoint(const TrainState& state, const nn::GptConfig& model, CheckpointData& d);
// Copies a checkpoint's tensors into the state's storage (addresses unchanged). Both files are
// checked first: any missing, extra, reshaped or retyped tensor is a keel::InputError listing
// them all, naming the file, and nothing is written.
void checkpoint_into_state(const CheckpointData& d, const nn::GptConfig& model,
                           const std::string& dir, TrainState& state);

}  // namespace keel::train
