#include "train/train_state.h"

#include "nn/layer_stack.h"
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

TrainState initial_state(const nn::GptConfig& model, bool stacked, const InitFn& init,
                         uint64_t seed) {
  TrainState s;
  s.stacked = stacked;
  s.params = nn::Variables(maybe_stacked(model, stacked, init(Scalar(static_cast<double>(seed)))));
  s.m = nn::Variables(maybe_stacked(model, stacked, zeros_like_params(model)));
  s.v = nn::Variables(maybe_stacked(model, stacked, zeros_like_params(model)));
  s.counters = nn::Variables(zero_counters(model));
  return s;
}

TrainState allocated_state(const nn::GptConfig& model, bool stacked) {
  TrainState s;
  s.stacked = stacked;
  const std::map<std::string, TensorType> per_layer = per_layer_types(model);
  const std::map<std::string, TensorType> types =
      stacked ? nn::stack_layer_types(model, per_layer) : per_layer;
  s.params = nn::Variables::allocate(types);
  s.m = nn::Variables::allocate(types);
  s.v = nn::Variables::allocate(types);
  s.counters = nn::Variables(zero_counters(model));
  return s;
}

void state_to_checkpoint(const TrainState& state, const nn::GptConfig& model, CheckpointData& d) {
  // Every copy starts before the first is waited for (unstacking reads them): they overlap.
  const NamedTensors held[] = {state.params.tensors(), state.m.tensors(), state.v.tensors()};
  for (const NamedTensors& part : held) start_host_copies(part);
  auto per_layer = [&](const NamedTensors& p) {
    return state.stacked ? nn::unstack_layer_params(model, p) : p;
  };
  d.model.clear();
  d.optimizer.clear();
  const NamedTensors params = per_layer(held[0]), m = per_layer(held[1]), v = per_layer(held[2]);
  for (const auto& [name, t] : params) d.model[name] = t.array();
  for (const auto& [name, t] : m) d.optimizer[name + kExpAvg] = t.array();
  for (const auto& [name, t] : v) d.optimizer[name + kExpAvgSq] = t.array();
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
  state.m.assign(maybe_stacked(model, state.stacked, m));
  state.v.assign(maybe_stacked(model, state.stacked, v));
}

}  // namespace keel::train
