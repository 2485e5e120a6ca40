#include "train/train_state.h"

#include "nn/layer_stack.h"
#include "train/step.h"

namespace keel::train {
namespace {

constexpr const char* kExpAvg = ".exp_avg";
constexpr const char* kExpAvgSq = ".exp_avg_sq";

nn::Params maybe_stacked(const nn::GptConfig& model, bool stacked, const nn::Params& per_layer) {
  return stacked ? nn::stack_layer_params(model, per_layer) : per_layer;
}

std::map<std::string, TensorType> types_of(const nn::Params& p) {
  std::map<std::string, TensorType> out;
  for (const auto& [name, t] : p) out[name] = t.type();
  return out;
}

// Names and types of the stored parameters, from the per-layer shapes (no program runs).
std::map<std::string, TensorType> parameter_types(const nn::GptConfig& model, bool stacked) {
  std::map<std::string, TensorType> per_layer;
  for (const auto& [name, shape] : nn::gpt_param_shapes(model)) {
    per_layer[name] = {DType::f32, shape};
  }
  if (!stacked) return per_layer;
  // The stacked layout, as stack_layer_params names and shapes it.
  nn::Params zeros;
  for (const auto& [name, t] : per_layer) zeros[name] = Tensor(Array(t.dtype, t.shape));
  return types_of(nn::stack_layer_params(model, zeros));
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
  const std::map<std::string, TensorType> types = parameter_types(model, stacked);
  s.params = nn::Variables::allocate(types);
  s.m = nn::Variables::allocate(types);
  s.v = nn::Variables::allocate(types);
  s.counters = nn::Variables(zero_counters(model));
  return s;
}

nn::Params per_layer_params(const TrainState& state, const nn::GptConfig& model) {
  nn::Params p = state.params.tensors();
  return state.stacked ? nn::unstack_layer_params(model, p) : p;
}

void state_to_checkpoint(const TrainState& state, const nn::GptConfig& model, CheckpointData& d) {
  auto per_layer = [&](const nn::Variables& v) {
    nn::Params p = v.tensors();
    return state.stacked ? nn::unstack_layer_params(model, p) : p;
  };
  d.model.clear();
  d.optimizer.clear();
  for (const auto& [name, t] : per_layer(state.params)) d.model[name] = t.array();
  for (const auto& [name, t] : per_layer(state.m)) d.optimizer[name + kExpAvg] = t.array();
  for (const auto& [name, t] : per_layer(state.v)) d.optimizer[name + kExpAvgSq] = t.array();
}

void checkpoint_into_state(const CheckpointData& d, const nn::GptConfig& model,
                           const std::string& dir, TrainState& state) {
  // Per-layer destinations: the state's own storage, or (stacked) per-layer buffers that are
  // then stacked into it.
  TensorMap params, moments;
  const nn::Params p_views =
      state.stacked ? per_layer_params(state, model) : state.params.tensors();
  for (const auto& [name, t] : p_views) {
    params[name] = t.array();
    moments[name + kExpAvg] = Array::uninitialized(t.dtype(), t.shape());
    moments[name + kExpAvgSq] = Array::uninitialized(t.dtype(), t.shape());
  }
  if (!state.stacked) {
    for (const auto& [name, a] : state.m.arrays()) moments[name + kExpAvg] = a;
    for (const auto& [name, a] : state.v.arrays()) moments[name + kExpAvgSq] = a;
  }
  copy_into(params, d.model, dir + "/model.safetensors");
  copy_into(moments, d.optimizer, dir + "/optimizer.safetensors");
  if (!state.stacked) return;
  nn::Params per_p, per_m, per_v;
  for (const auto& [name, a] : params) per_p[name] = Tensor(a);
  for (const auto& [name, a] : moments) {
    const bool sq = name.ends_with(kExpAvgSq);
    const std::string base = name.substr(0, name.size() - (sq ? 11 : 8));
    (sq ? per_v : per_m)[base] = Tensor(a);
  }
  state.params.assign(nn::stack_layer_params(model, per_p));
  state.m.assign(nn::stack_layer_params(model, per_m));
  state.v.assign(nn::stack_layer_params(model, per_v));
}

}  // namespace keel::train
