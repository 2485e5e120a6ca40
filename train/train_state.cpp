#include "train/train_state.h"

#include "backend/collectives.h"
#include "nn/layer_stack.h"
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

}  // namespace

std::map<std::string, TensorType> stored_types(const nn::GptConfig& model, bool stacked) {
  const std::map<std::string, TensorType> per_layer = per_layer_types(model);
  return stacked ? nn::stack_layer_types(model, per_layer) : per_layer;
}

NamedTensors zero_moments(const std::map<std::string, TensorType>& types) {
  NamedTensors out;
  for (const auto& [name, t] : types) out[name] = Tensor(Array::full(t.shape, 0.0, t.dtype));
  return out;
}

std::vector<StateTensorLayout> state_layout(const nn::GptConfig& model, bool stacked,
                                            int64_t moment_shards, int64_t gradient_shards) {
  std::vector<StateTensorLayout> out;
  for (const auto& [name, t] : stored_types(model, stacked)) {
    moment_shard_type(name, t, moment_shards);  // refuses a count that does not divide it
    moment_shard_type(name, t, gradient_shards);
    out.push_back({name, t, gradient_shards, moment_shards});
  }
  return out;
}

StateBytes state_bytes(const nn::GptConfig& model, bool stacked, int64_t moment_shards,
                       int64_t gradient_shards) {
  StateBytes b;
  for (const StateTensorLayout& t : state_layout(model, stacked, moment_shards, gradient_shards)) {
    b.parameters += t.parameter_bytes();
    b.gradients += t.gradient_bytes();
    b.optimizer += t.optimizer_bytes();
  }
  return b;
}

TrainState initial_state(const nn::GptConfig& model, bool stacked, const InitFn& init,
                         uint64_t seed, int64_t moment_shards) {
  TrainState s;
  s.stacked = stacked;
  s.moment_shards = moment_shards;
  s.params = nn::Variables(maybe_stacked(model, stacked, init(Scalar(static_cast<double>(seed)))));
  if (moment_shards > 1) {
    const auto slices = moment_shard_types(stored_types(model, stacked), moment_shards);
    s.m = nn::Variables(zero_moments(slices));
    s.v = nn::Variables(zero_moments(slices));
  } else {
    s.m = nn::Variables(maybe_stacked(model, stacked, zeros_like_params(model)));
    s.v = nn::Variables(maybe_stacked(model, stacked, zeros_like_params(model)));
  }
  s.counters = nn::Variables(zero_counters(model));
  return s;
}

TrainState allocated_state(const nn::GptConfig& model, bool stacked, int64_t moment_shards) {
  TrainState s;
  s.stacked = stacked;
  s.moment_shards = moment_shards;
  const std::map<std::string, TensorType> types = stored_types(model, stacked);
  const std::map<std::string, TensorType> moments =
      moment_shards > 1 ? moment_shard_types(types, moment_shards) : types;
  s.params = nn::Variables::allocate(types);
  s.m = nn::Variables::allocate(moments);
  s.v = nn::Variables::allocate(moments);
  s.counters = nn::Variables(zero_counters(model));
  return s;
}

namespace {

// Split moments of a state stored per layer, whole, one tensor at a time, under the optimizer
// file's names; every process asks for the same names in the same order.
void split_moment_source(const TrainState& state, const nn::GptConfig& model, CheckpointData& d) {
  d.optimizer_types.clear();
  for (const auto& [name, t] : stored_types(model, false)) {
    d.optimizer_types[name + kExpAvg] = t;
    d.optimizer_types[name + kExpAvgSq] = t;
  }
  const NamedTensors m = state.m.tensors(), v = state.v.tensors();
  const std::map<std::string, TensorType> types = d.optimizer_types;
  d.optimizer_tensor = [m, v, types](const std::string& name) {
    const bool sq = name.ends_with(kExpAvgSq);
    const std::string param =
        name.substr(0, name.size() - std::string(sq ? kExpAvgSq : kExpAvg).size());
    const NamedTensors one = {{name, (sq ? v : m).at(param)}};
    return gather_moments(one, {{name, types.at(name)}}).at(name).array();
  };
}

}  // namespace

void state_to_checkpoint(const TrainState& state, const nn::GptConfig& model, CheckpointData& d) {
  // Every copy starts before the first is waited for (unstacking reads them): they overlap.
  const NamedTensors held[] = {state.params.tensors(), state.m.tensors(), state.v.tensors()};
  for (const NamedTensors& part : held) start_host_copies(part);
  auto per_layer = [&](const NamedTensors& p) {
    return state.stacked ? nn::unstack_layer_params(model, p) : p;
  };
  d.model.clear();
  d.optimizer.clear();
  for (const auto& [name, t] : per_layer(held[0])) d.model[name] = t.array();
  if (state.moment_shards > 1 && !state.stacked) {
    split_moment_source(state, model, d);  // gathered as the file is written
    return;
  }
  NamedTensors whole_m = held[1], whole_v = held[2];
  if (state.moment_shards > 1) {  // stacked: gathered whole, then unstacked
    const std::map<std::string, TensorType> types = stored_types(model, state.stacked);
    whole_m = gather_moments(whole_m, types);
    whole_v = gather_moments(whole_v, types);
  }
  for (const auto& [name, t] : per_layer(whole_m)) d.optimizer[name + kExpAvg] = t.array();
  for (const auto& [name, t] : per_layer(whole_v)) d.optimizer[name + kExpAvgSq] = t.array();
}

void send_moments_for_checkpoint(const TrainState& state, const nn::GptConfig& model) {
  if (state.moment_shards == 1) return;
  if (!state.stacked) {
    CheckpointData d;
    split_moment_source(state, model, d);
    for (const auto& [name, t] : d.optimizer_types) d.optimizer_tensor(name);
    return;
  }
  const std::map<std::string, TensorType> types = stored_types(model, true);
  gather_moments(state.m.tensors(), types);
  gather_moments(state.v.tensors(), types);
}

void checkpoint_into_state(const CheckpointData& d, const nn::GptConfig& model,
                           const std::string& dir, TrainState& state) {
  // Both files are checked before anything is written, so a bad one leaves the state as it was.
  const std::map<std::string, TensorType> params = per_layer_types(model);
  std::map<std::string, TensorType> moments;
  for (const auto& [name, t] : params) {
    moments[name + kExpAvg] = t;
    moments[name + kExpAvgSq] = t;
  }
  check_tensors(params, d.model, dir + "/model.safetensors");
  check_tensors(moments, d.optimizer, dir + "/optimizer.safetensors");
  NamedTensors p, m, v;
  for (const auto& [name, a] : d.model) p[name] = Tensor(a);
  for (const auto& [name, t] : params) {
    m[name] = Tensor(d.optimizer.at(name + kExpAvg));
    v[name] = Tensor(d.optimizer.at(name + kExpAvgSq));
  }
  // Stacked one set at a time: the host holds one set's stacked copy beside the checkpoint.
  state.params.assign(maybe_stacked(model, state.stacked, p));
  auto mine = [&](const NamedTensors& whole) {
    const NamedTensors stored = maybe_stacked(model, state.stacked, whole);
    if (state.moment_shards == 1) return stored;
    return slice_moments(stored, state.moment_shards, backend::collectives().axis_index(kDataAxis));
  };
  state.m.assign(mine(m));
  state.v.assign(mine(v));
}

}  // namespace keel::train
