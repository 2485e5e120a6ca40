#pragma once
// The training state as Variables (nn/variables.h): parameters, AdamW's moments and the device
// counters, long-lived buffers every step writes in place. A scanned layer stack stores its
// layers' tensors stacked (nn/layer_stack.h); checkpoints are always per layer. A new run fills
// the state with the init program; a resume allocates it and copies a checkpoint in, so the init
// program never runs.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nn/gpt.h"
#include "nn/variables.h"
#include "train/checkpoint.h"
#include "train/gpt_step.h"

namespace keel::train {

// Over how many of the data axis's processes each part of the training state is split: each
// holds a flat slice (train/moment_shards.h) of every tensor of a part split over more than one.
// ZeRO stage 1 splits AdamW's moments, 2 the reduced gradients too, 3 the parameters too.
struct StateShards {
  int64_t parameters = 1, gradients = 1, moments = 1;
  // sharding.zero = `stage` over `processes` processes.
  static StateShards at_stage(int64_t stage, int64_t processes);
};

struct TrainState {
  nn::Variables params, m, v, counters;
  bool stacked = false;  // scanned layers' tensors stored [layers, ...]
  // What the Variables hold: whole tensors, or this process's slices of them.
  StateShards shards;
};

// How one stored parameter's training state lies over the data axis's processes: the parameter,
// its reduced gradient and AdamW's moments each whole or each process's flat slice of them
// (1/shards of the elements).
struct StateTensorLayout {
  std::string name;
  TensorType type;  // global, as stored
  StateShards shards;
  int64_t model = 1;  // processes of "model" the blocks split it over (nn/tensor_parallel.h)
  Shape model_shard;  // with model > 1: the shape each of them holds
  int64_t parameter_bytes() const { return type.bytes() / model / shards.parameters; }
  int64_t gradient_bytes() const { return type.bytes() / model / shards.gradients; }
  int64_t optimizer_bytes() const { return 2 * type.bytes() / model / shards.moments; }
};
// Every stored tensor's layout, by name; keel::InputError naming a tensor the shards do not
// divide.
std::vector<StateTensorLayout> state_layout(const nn::GptConfig& model, bool stacked,
                                            StateShards shards);

// The bytes of training state one process holds: its parameters (its slices at ZeRO stage 3), the
// reduced gradients the update reads (whole at stages 0 and 1; its slices from stage 2) and
// AdamW's moments (its slices from stage 1). Neither the sum over this process's micro-batches
// that is reduced nor the parameters stage 3 gathers where they are used are state (the observed
// peak shows them). Arithmetic from the config: nothing is allocated.
struct StateBytes {
  int64_t parameters = 0, gradients = 0, optimizer = 0;
  int64_t total() const { return parameters + gradients + optimizer; }
};
// The types the state stores its parameters (and whole moments) as: per layer, or scanned
// layers' tensors stacked [layers, ...]; with the blocks split over "model", this process's
// shards of the split ones (train/model_shards.h).
std::map<std::string, TensorType> stored_types(const nn::GptConfig& model, bool stacked);
// `stacked`: scanned layers' tensors stored [layers, ...], which is what the moments split.
StateBytes state_bytes(const nn::GptConfig& model, bool stacked = false, StateShards shards = {});

// The init program of a state of this layout: each parameter drawn as gpt_init draws it, then
// this process's shard over "model" and slice over "data" of it (stacked, where scanned), so the
// program's results are what the process holds and no more than one stored tensor is whole.
InitFn make_state_init(const nn::GptConfig& model, bool stacked, StateShards shards = {});
// The init program's parameters (seeded), zero moments and counters. `init` gives what the
// state holds (make_state_init's, adopted), or every parameter whole and per layer
// (make_gpt_init's: this process's slices placed from each, one at a time).
TrainState initial_state(const nn::GptConfig& model, bool stacked, const InitFn& init,
                         uint64_t seed, StateShards shards = {});
// Storage for every tensor, contents unspecified, counters zero: for a checkpoint to fill.
TrainState allocated_state(const nn::GptConfig& model, bool stacked, StateShards shards = {});

// Per-layer parameters and moments ("<name>.exp_avg", "<name>.exp_avg_sq") to write, whole,
// into `d` (its step and trainer kept). Parts held whole and per layer are given as they are;
// the rest are asked for one tensor at a time as each file is written (d.model_tensor,
// d.optimizer_tensor, in d.model_order and d.optimizer_order), gathered over "data" and "model"
// (every other process calls send_moments_for_checkpoint meanwhile), a scanned stack split over
// "data" a layer at a time: the writer holds one tensor (one layer) whole at a time, never the
// state.
void state_to_checkpoint(const TrainState& state, const nn::GptConfig& model, CheckpointData& d);
// What a process other than the writer does while state_to_checkpoint's files are written: its
// part of each gather, in the same order. Nothing when nothing is split.
void send_moments_for_checkpoint(const TrainState& state, const nn::GptConfig& model);
// Overwrites the parameters `given` names (whole and per layer, of this model's types) with
// this process's slices and shards of `tensor`'s values, each asked for once, so the host holds
// one variable's value and one given tensor at a time; the others keep theirs (--init-from, a
// model file opened). keel::Error for a name or type that is not this model's.
void parameters_into_state(const std::map<std::string, TensorType>& given,
                           const std::function<Array(const std::string&)>& tensor,
                           const nn::GptConfig& model, TrainState& state);
// Copies a checkpoint's tensors into the state's storage (addresses unchanged), split parts
// this process's slices (or shards over "model") of the whole ones. Of a checkpoint opened
// (open_checkpoint) each tensor is read from its file as its variable is filled, so the host
// holds one variable's value and one checkpoint tensor at a time, never the files. Both files'
// tensor lists are checked first: any missing, extra, reshaped or retyped tensor is a
// keel::InputError listing them all, naming the file, and nothing is written. A value that is not
// finite, or bytes that do not match a file's checksum, are found as they are read: the
// InputError then leaves the state partly written.
void checkpoint_into_state(const CheckpointData& d, const nn::GptConfig& model,
                           const std::string& dir, TrainState& state);

}  // namespace keel::train
