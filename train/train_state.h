#pragma once
// The training state as Variables (nn/variables.h): parameters, AdamW's moments and the device
// counters, long-lived buffers every step writes in place. A scanned layer stack stores its
// layers' tensors stacked (nn/layer_stack.h); checkpoints are always per layer. A new run fills
// the state with the init program; a resume allocates it and copies a checkpoint in, so the init
// program never runs.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/gpt.h"
#include "nn/variables.h"
#include "train/checkpoint.h"
#include "train/gpt_step.h"

namespace keel::train {

struct TrainState {
  nn::Variables params, m, v, counters;
  bool stacked = false;  // scanned layers' tensors stored [layers, ...]
  // Processes AdamW's moments are split over (sharding.zero = 1): each holds a flat slice of
  // every moment tensor (train/moment_shards.h); 1: whole.
  int64_t moment_shards = 1;
};

// How one stored parameter's training state lies over the data axis's processes: the parameter
// whole on every process; its reduced gradient and AdamW's moments whole or each process's flat
// slice of them (1/shards of the elements).
struct StateTensorLayout {
  std::string name;
  TensorType type;  // global, as stored
  int64_t gradient_shards = 1, moment_shards = 1;
  int64_t parameter_bytes() const { return type.bytes(); }
  int64_t gradient_bytes() const { return type.bytes() / gradient_shards; }
  int64_t optimizer_bytes() const { return 2 * type.bytes() / moment_shards; }
};
// Every stored tensor's layout, by name; keel::InputError naming a tensor the shards do not
// divide.
std::vector<StateTensorLayout> state_layout(const nn::GptConfig& model, bool stacked,
                                            int64_t moment_shards, int64_t gradient_shards);

// The bytes of training state one process holds: its parameters, the reduced gradients the update
// reads (whole at ZeRO stages 0 and 1; its slices at stage 2, `gradient_shards` > 1) and AdamW's
// moments (its slices when split over `moment_shards` processes). The sum over this process's
// micro-batches that is reduced is whole at every stage (the observed peak shows it). Arithmetic
// from the config: nothing is allocated.
struct StateBytes {
  int64_t parameters = 0, gradients = 0, optimizer = 0;
  int64_t total() const { return parameters + gradients + optimizer; }
};
// The types the state stores its parameters (and whole moments) as: per layer, or scanned
// layers' tensors stacked [layers, ...].
std::map<std::string, TensorType> stored_types(const nn::GptConfig& model, bool stacked);
// `stacked`: scanned layers' tensors stored [layers, ...], which is what the moments split.
StateBytes state_bytes(const nn::GptConfig& model, bool stacked = false, int64_t moment_shards = 1,
                       int64_t gradient_shards = 1);

// The init program's parameters (seeded), zero moments and counters; the moments this process's
// slices when `moment_shards` > 1.
TrainState initial_state(const nn::GptConfig& model, bool stacked, const InitFn& init,
                         uint64_t seed, int64_t moment_shards = 1);
// Storage for every tensor, contents unspecified, counters zero: for a checkpoint to fill.
TrainState allocated_state(const nn::GptConfig& model, bool stacked, int64_t moment_shards = 1);

// Per-layer parameters and moments ("<name>.exp_avg", "<name>.exp_avg_sq") to write, the moments
// whole. Split moments are gathered over the data axis (every other process calls
// send_moments_for_checkpoint meanwhile): of a state stored per layer, one tensor at a time as
// the file is written (d.optimizer_tensor), so the writer never holds them all.
void state_to_checkpoint(const TrainState& state, const nn::GptConfig& model, CheckpointData& d);
// What a process other than the writer does while state_to_checkpoint runs on the writer: its
// slices of split moments, sent in the same order. Nothing when the moments are whole.
void send_moments_for_checkpoint(const TrainState& state, const nn::GptConfig& model);
// Copies a checkpoint's tensors into the state's storage (addresses unchanged), split moments
// this process's slices of the whole ones. Both files are checked first: any missing, extra,
// reshaped or retyped tensor is a keel::InputError listing them all, naming the file, and
// nothing is written.
void checkpoint_into_state(const CheckpointData& d, const nn::GptConfig& model,
                           const std::string& dir, TrainState& state);

}  // namespace keel::train
