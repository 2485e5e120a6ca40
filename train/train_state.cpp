#include "train/train_state.h"

#include <cstring>

#include "backend/collectives.h"
#include "ir/error.h"
#include "nn/layer_stack.h"
#include "train/model_shards.h"
#include "train/moment_shards.h"
#include "train/step.h"

namespace keel::train {
namespace {

constexpr const char* kExpAvg = ".exp_avg";
constexpr const char* kExpAvgSq = ".exp_avg_sq";

NamedTensors maybe_stacked(const nn::GptConfig& model, bool stacked,
                           const NamedTensors& per_layer) {
  return stacked ? nn::stack_layer_params(model, per_layer) : per_layer;
}

// Names and types of the per-layer parameters, from the config (no program runs).
std::map<std::string, TensorType> per_layer_types(const nn::GptConfig& model) {
  std::map<std::string, TensorType> out;
  for (const auto& [name, shape] : nn::gpt_param_shapes(model)) out[name] = {DType::f32, shape};
  return out;
}

// The optimizer file's names and types for parameters of these: both moments of each.
std::map<std::string, TensorType> optimizer_types(const std::map<std::string, TensorType>& params) {
  std::map<std::string, TensorType> out;
  for (const auto& [name, t] : params) {
    out[name + kExpAvg] = t;
    out[name + kExpAvgSq] = t;
  }
  return out;
}

// The parameter an optimizer file's name is a moment of.
std::string moment_parameter(const std::string& name) {
  const bool sq = name.ends_with(kExpAvgSq);
  return name.substr(0, name.size() - std::strlen(sq ? kExpAvgSq : kExpAvg));
}

// The moment an optimizer file's name holds: its parameter's value in `m` or in `v`.
const Tensor& moment_named(const std::string& name, const NamedTensors& m, const NamedTensors& v) {
  return (name.ends_with(kExpAvgSq) ? v : m).at(moment_parameter(name));
}

}  // namespace

std::map<std::string, TensorType> stored_types(const nn::GptConfig& model, bool stacked) {
  const std::map<std::string, TensorType> per_layer = per_layer_types(model);
  // Split over "model", each layer's shards are what a scanned run stacks.
  const std::map<std::string, TensorType> held =
      model.model_parallel > 1 ? model_shard_types(model, per_layer) : per_layer;
  return stacked ? nn::stack_layer_types(model, held) : held;
}

NamedTensors zero_moments(const std::map<std::string, TensorType>& types) {
  NamedTensors out;
  for (const auto& [name, t] : types) out[name] = Tensor(Array::full(t.shape, 0.0, t.dtype));
  return out;
}

StateShards StateShards::at_stage(int64_t stage, int64_t processes) {
  return {stage >= 3 ? processes : 1, stage >= 2 ? processes : 1, stage >= 1 ? processes : 1};
}

std::vector<StateTensorLayout> state_layout(const nn::GptConfig& model, bool stacked,
                                            StateShards shards) {
  std::vector<StateTensorLayout> out;
  const std::map<std::string, TensorType> whole = stored_types(unsplit(model), stacked);
  for (const auto& [name, t] : stored_types(model, stacked)) {
    for (int64_t n : {shards.parameters, shards.gradients, shards.moments}) {
      moment_shard_type(name, t, n);  // refuses a count that does not divide it
    }
    const TensorType& global = whole.at(name);
    const int64_t split = global.shape == t.shape ? 1 : numel(global.shape) / numel(t.shape);
    out.push_back({name, global, shards, split, split > 1 ? t.shape : Shape{}});
  }
  return out;
}

StateBytes state_bytes(const nn::GptConfig& model, bool stacked, StateShards shards) {
  StateBytes b;
  for (const StateTensorLayout& t : state_layout(model, stacked, shards)) {
    b.parameters += t.parameter_bytes();
    b.gradients += t.gradient_bytes();
    b.optimizer += t.optimizer_bytes();
  }
  return b;
}

namespace {

// The types a part split over `shards` processes is held as here.
std::map<std::string, TensorType> held_types(const std::map<std::string, TensorType>& whole,
                                             int64_t shards) {
  return shards > 1 ? moment_shard_types(whole, shards) : whole;
}

NamedTensors mine(const NamedTensors& whole, int64_t shards) {
  if (shards == 1) return whole;
  return slice_moments(whole, shards, backend::collectives().axis_index(kDataAxis));
}

}  // namespace

TrainState initial_state(const nn::GptConfig& model, bool stacked, const InitFn& init,
                         uint64_t seed, StateShards shards, const NamedTensors& copied) {
  TrainState s;
  s.stacked = stacked;
  s.shards = shards;
  NamedTensors whole = init(Scalar(static_cast<double>(seed)));  // on every process
  for (const auto& [name, t] : copied) whole.at(name) = t;
  s.params = nn::Variables(
      mine(maybe_stacked(model, stacked, model_shards(model, whole)), shards.parameters));
  const auto moments = held_types(stored_types(model, stacked), shards.moments);
  s.m = nn::Variables(zero_moments(moments));
  s.v = nn::Variables(zero_moments(moments));
  s.counters = nn::Variables(zero_counters(model));
  return s;
}

TrainState allocated_state(const nn::GptConfig& model, bool stacked, StateShards shards) {
  TrainState s;
  s.stacked = stacked;
  s.shards = shards;
  const std::map<std::string, TensorType> types = stored_types(model, stacked);
  const std::map<std::string, TensorType> moments = held_types(types, shards.moments);
  s.params = nn::Variables::allocate(held_types(types, shards.parameters));
  s.m = nn::Variables::allocate(moments);
  s.v = nn::Variables::allocate(moments);
  s.counters = nn::Variables(zero_counters(model));
  return s;
}

namespace {

// How the stored tensors lie over "model": the type each process holds before any split over
// "data" (its shard, or the whole tensor), and the blocks' splits (nn::gpt_model_splits).
struct ModelLayout {
  std::map<std::string, TensorType> shards;
  std::map<std::string, nn::ModelSplit> splits;
  int64_t processes = 1;
  explicit ModelLayout(const nn::GptConfig& model)
      : shards(stored_types(model, false)),
        splits(nn::gpt_model_splits(model)),
        processes(model.model_parallel) {}
};

// One stored tensor whole from what this process holds of it: its slices gathered over "data"
// when the part is split there (`data_shards` > 1), then its shard over "model" when the blocks
// split it. Every process of both axes calls it together.
Tensor whole_tensor(const std::string& name, const Tensor& held, int64_t data_shards,
                    const ModelLayout& layout) {
  const Tensor over_data =
      data_shards > 1 ? gather_moments({{name, held}}, {{name, layout.shards.at(name)}}).at(name)
                      : held;
  return whole_over_model(layout.splits, layout.processes, name, over_data);
}

// The parts of a state stored per layer that are split over "data" or "model", whole, one
// tensor at a time as each file is written (every process asks for the same names in the same
// order); the parts held whole as they are, when `whole_parts` (the writer's). `p`, `m` and `v`:
// the state's tensors, whose host copies may have started.
void gathered_source(const NamedTensors& p, const NamedTensors& m, const NamedTensors& v,
                     StateShards held, const nn::GptConfig& model, bool whole_parts,
                     CheckpointData& d) {
  const ModelLayout layout(model);
  const int64_t M = model.model_parallel, P = held.parameters, S = held.moments;
  d.model.clear();
  d.optimizer.clear();
  d.model_types = per_layer_types(model);
  d.optimizer_types = optimizer_types(d.model_types);
  if (P > 1 || M > 1) {
    d.model_tensor = [p, layout, P](const std::string& name) {
      return whole_tensor(name, p.at(name), P, layout).array();
    };
  } else if (whole_parts) {
    for (const auto& [name, t] : p) d.model[name] = t.array();
  }
  if (S > 1 || M > 1) {
    d.optimizer_tensor = [m, v, layout, S](const std::string& name) {
      return whole_tensor(moment_parameter(name), moment_named(name, m, v), S, layout).array();
    };
  } else if (whole_parts) {
    for (const auto& [name, t] : m) d.optimizer[name + kExpAvg] = t.array();
    for (const auto& [name, t] : v) d.optimizer[name + kExpAvgSq] = t.array();
  }
}

// A part of a stacked state per layer and whole: every process's slices gathered over "data"
// (all at once), unstacked, then each layer's shards gathered over "model" tensor by tensor.
// Every process of both axes calls it together.
NamedTensors whole_per_layer(const NamedTensors& held, const nn::GptConfig& model, int64_t shards) {
  NamedTensors out = nn::unstack_layer_params(
      model, shards > 1 ? gather_moments(held, stored_types(model, true)) : held);
  if (model.model_parallel == 1) return out;
  const std::map<std::string, nn::ModelSplit> splits = nn::gpt_model_splits(model);
  for (auto& [name, t] : out) t = whole_over_model(splits, model.model_parallel, name, t);
  return out;
}

}  // namespace

void state_to_checkpoint(const TrainState& state, const nn::GptConfig& model, CheckpointData& d) {
  // Every copy starts before the first is waited for (unstacking reads them): they overlap.
  const NamedTensors held[] = {state.params.tensors(), state.m.tensors(), state.v.tensors()};
  for (const NamedTensors& part : held) start_host_copies(part);
  d.model.clear();
  d.optimizer.clear();
  if (!state.stacked) {  // split parts are gathered as the files are written
    gathered_source(held[0], held[1], held[2], state.shards, model, true, d);
    return;
  }
  // Stacked: each part gathered whole and unstacked.
  for (const auto& [name, t] : whole_per_layer(held[0], model, state.shards.parameters)) {
    d.model[name] = t.array();
  }
  for (const auto& [name, t] : whole_per_layer(held[1], model, state.shards.moments)) {
    d.optimizer[name + kExpAvg] = t.array();
  }
  for (const auto& [name, t] : whole_per_layer(held[2], model, state.shards.moments)) {
    d.optimizer[name + kExpAvgSq] = t.array();
  }
}

void send_moments_for_checkpoint(const TrainState& state, const nn::GptConfig& model) {
  if (state.stacked) {  // state_to_checkpoint's gathers, in its order
    whole_per_layer(state.params.tensors(), model, state.shards.parameters);
    whole_per_layer(state.m.tensors(), model, state.shards.moments);
    whole_per_layer(state.v.tensors(), model, state.shards.moments);
    return;
  }
  CheckpointData d;  // the writer's gathers, in its order: the model file, then the optimizer's
  gathered_source(state.params.tensors(), state.m.tensors(), state.v.tensors(), state.shards, model,
                  false, d);
  if (d.model_tensor) {
    for (const auto& [name, t] : d.model_types) d.model_tensor(name);
  }
  if (d.optimizer_tensor) {
    for (const auto& [name, t] : d.optimizer_types) d.optimizer_tensor(name);
  }
}

NamedTensors whole_parameters(const TrainState& state, const nn::GptConfig& model) {
  if (state.shards.parameters == 1 && model.model_parallel == 1) return state.params.tensors();
  if (state.stacked && model.model_parallel > 1) {
    return nn::stack_layer_params(
        unsplit(model), whole_per_layer(state.params.tensors(), model, state.shards.parameters));
  }
  if (state.stacked) return gather_moments(state.params.tensors(), stored_types(model, true));
  const ModelLayout layout(model);
  NamedTensors out;
  for (const auto& [name, t] : state.params.tensors()) {
    out[name] = whole_tensor(name, t, state.shards.parameters, layout);
  }
  return out;
}

void checkpoint_into_state(const CheckpointData& d, const nn::GptConfig& model,
                           const std::string& dir, TrainState& state) {
  // Both files are checked before anything is written, so a bad one leaves the state as it was.
  const std::map<std::string, TensorType> params = per_layer_types(model);
  check_tensors(params, d.model, dir + "/model.safetensors");
  check_tensors(optimizer_types(params), d.optimizer, dir + "/optimizer.safetensors");
  NamedTensors p, m, v;
  for (const auto& [name, a] : d.model) p[name] = Tensor(a);
  for (const auto& [name, t] : params) {
    m[name] = Tensor(d.optimizer.at(name + kExpAvg));
    v[name] = Tensor(d.optimizer.at(name + kExpAvgSq));
  }
  // Stacked one set at a time: the host holds one set's stacked copy beside the checkpoint.
  const StateShards& n = state.shards;
  auto held = [&](const NamedTensors& whole, int64_t shards) {
    return mine(maybe_stacked(model, state.stacked, model_shards(model, whole)), shards);
  };
  state.params.assign(held(p, n.parameters));
  state.m.assign(held(m, n.moments));
  state.v.assign(held(v, n.moments));
}

}  // namespace keel::train
