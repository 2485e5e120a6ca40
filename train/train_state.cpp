#include "train/train_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/collectives.h"
#include "ir/error.h"
#include "nn/layer_stack.h"
#include "nn/tensor_parallel.h"
#include "trace/collectives.h"
#include "trace/ops.h"
#include "train/model_shards.h"
#include "train/moment_shards.h"
#include "train/step.h"

namespace keel::train {
namespace {

constexpr const char* kExpAvg = ".exp_avg";
constexpr const char* kExpAvgSq = ".exp_avg_sq";

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

// Each stored tensor's per-layer tensors, in the order its storage concatenates them: the
// layers a scanned stack holds, or the tensor itself.
std::map<std::string, std::vector<std::string>> stored_parts(const nn::GptConfig& model,
                                                             bool stacked) {
  std::map<std::string, std::vector<std::string>> out;
  const std::map<std::string, TensorType> per_layer = per_layer_types(model);
  if (stacked) {
    for (const auto& [name, layers] : nn::stacked_layer_names(model, per_layer)) out[name] = layers;
  }
  for (const auto& [name, t] : stored_types(model, stacked)) {
    if (!out.count(name)) out[name] = {name};
  }
  return out;
}

// Fills `vars` (stored tensors, or this process's flat slices over `data_shards`) from whole
// per-layer tensors asked for once each, so the host holds one variable's value at a time.
// `given`: the per-layer tensors `whole` has (all when null); the others keep their values, and
// a variable with none of them is not touched.
void fill(nn::Variables& vars, const nn::GptConfig& model, bool stacked, int64_t data_shards,
          const std::function<Array(const std::string&)>& whole,
          const std::function<bool(const std::string&)>& given = nullptr) {
  const std::map<std::string, TensorType> stored = stored_types(model, stacked);
  const std::map<std::string, nn::ModelSplit> splits = nn::gpt_model_splits(model);
  const std::map<std::string, TensorType> layer_types =
      model_shard_types(model, per_layer_types(model));  // what each layer is held as here
  const int64_t rank = data_shards > 1 ? backend::collectives().axis_index(kDataAxis) : 0;
  for (const auto& [name, layers] : stored_parts(model, stacked)) {
    const auto has = [&given](const std::string& layer) { return !given || given(layer); };
    const auto count_given = std::count_if(layers.begin(), layers.end(), has);
    if (count_given == 0) continue;
    const TensorType& t = stored.at(name);
    const TensorType held_type = data_shards > 1 ? moment_shard_type(name, t, data_shards) : t;
    // Layer r (a stack's row; the tensor itself otherwise) held here: its elements
    // [rank * q, (rank + 1) * q), at r * q.
    const auto rows = static_cast<int64_t>(layers.size());
    const int64_t q = numel(held_type.shape) / rows;
    const auto item = static_cast<int64_t>(dtype_size(t.dtype));
    if (split_rows(name, t.shape) != rows) {
      throw Error(fmt::format("[train] internal: {} stores {} layers as {} rows", name,
                              layers.size(), split_rows(name, t.shape)));
    }
    Array held = count_given == static_cast<std::ptrdiff_t>(layers.size())
                     ? Array::uninitialized(held_type.dtype, held_type.shape)
                     : vars.tensors().at(name).array().clone();  // the layers not given kept
    for (int64_t r = 0; r < rows; ++r) {
      const std::string& layer = layers[static_cast<size_t>(r)];
      if (numel(layer_types.at(layer).shape) * rows != numel(t.shape)) {
        throw Error(fmt::format("[train] internal: layer {} of {} holds {} elements, not {}", layer,
                                name, numel(layer_types.at(layer).shape), numel(t.shape) / rows));
      }
      if (!has(layer)) continue;
      const Array part = model_shard(splits, model.model_parallel, layer, whole(layer));
      std::memcpy(held.data() + r * q * item, part.data() + rank * q * item,
                  static_cast<size_t>(q * item));
    }
    vars.assign(name, held);
  }
}

// Inside a trace: this process's shard over "model" of `whole` split by `s`: block axis_index of
// each part along s.dim, the parts concatenated (train/model_shards.h's element order).
Tensor own_model_shard(const Tensor& whole, const nn::ModelSplit& s, int64_t processes) {
  const Tensor me = reshape(axis_index(nn::kModelAxis), {1});
  const Shape& shape = whole.shape();
  const auto d = static_cast<size_t>(s.dim);
  std::vector<Tensor> blocks;
  int64_t start = 0;
  for (const int64_t part : s.parts) {
    Axes lo(shape.size(), 0), hi(shape.begin(), shape.end());
    lo[d] = start;
    hi[d] = start + part;
    Shape cut = shape, held = shape;
    cut[d] = part / processes;
    cut.insert(cut.begin() + static_cast<int64_t>(d), processes);  // [..., M, part / M, ...]
    held[d] = part / processes;
    blocks.push_back(reshape(take(reshape(slice(whole, lo, hi), cut), me, s.dim), held));
    start += part;
  }
  return blocks.size() == 1 ? blocks[0] : concat(blocks, s.dim);
}

}  // namespace

InitFn make_state_init(const nn::GptConfig& model, bool stacked, StateShards shards) {
  const std::map<std::string, nn::ModelSplit> splits = nn::gpt_model_splits(model);
  const std::map<std::string, std::vector<std::string>> parts = stored_parts(model, stacked);
  CompileOptions o;
  if (shards.parameters > 1) o.varying_results[0] = {kDataAxis};
  for (const auto& [name, layers] : parts) {
    if (splits.count(layers.front())) o.varying_result_leaves[0][name] = {nn::kModelAxis};
  }
  const int64_t data_shards = shards.parameters;
  return InitFn(
      "init",
      [model, splits, parts, data_shards](const Scalar& seed) {
        std::vector<std::string> order;  // a stored tensor's layers together
        for (const auto& [name, layers] : parts) {
          order.insert(order.end(), layers.begin(), layers.end());
        }
        NamedTensors out;
        std::vector<Tensor> rows;
        auto next = parts.begin();
        nn::gpt_init_each(
            model, cast(seed, DType::i64), order,
            [&](const std::string& name, const Tensor& whole) {
              const auto split = splits.find(name);
              rows.push_back(split == splits.end()
                                 ? whole
                                 : own_model_shard(whole, split->second, model.model_parallel));
              if (rows.size() < next->second.size()) return;
              Tensor stored = rows[0];
              if (next->second != std::vector{next->first}) {  // a scanned stack of its layers
                for (Tensor& row : rows) {
                  Shape one = row.shape();
                  one.insert(one.begin(), 1);
                  row = reshape(row, one);
                }
                stored = concat(rows, 0);
              }
              out[next->first] =
                  data_shards > 1 ? own_slice(next->first, stored, data_shards) : stored;
              rows.clear();
              ++next;
            });
        return out;
      },
      o, SourceLoc::current());
}

TrainState initial_state(const nn::GptConfig& model, bool stacked, const InitFn& init,
                         uint64_t seed, StateShards shards) {
  TrainState s;
  s.stacked = stacked;
  s.shards = shards;
  NamedTensors whole = init(Scalar(static_cast<double>(seed)));
  const std::map<std::string, TensorType> types = stored_types(model, stacked);
  const std::map<std::string, TensorType> held = held_types(types, shards.parameters);
  std::map<std::string, TensorType> made;
  for (const auto& [name, t] : whole) made[name] = t.type();
  const bool per_layer = made == per_layer_types(model);
  if (made != held && !per_layer) {
    throw Error(
        "[train] internal: the init makes neither this layout's held tensors nor whole per-layer "
        "ones; build it with make_state_init(model, stacked, shards) or make_gpt_init(model)");
  }
  if (made == held) {
    s.params = nn::Variables(whole);  // the init's own buffers
  } else {  // whole per layer: each dropped once placed, one copy to the host at a time
    s.params = nn::Variables::allocate(held);
    fill(s.params, model, stacked, shards.parameters, [&whole](const std::string& name) {
      const Array a = whole.at(name).array();
      whole.erase(name);
      return a;
    });
  }
  const auto moments = held_types(types, shards.moments);
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

// One part of the state's whole per-layer tensors, gathered over "data" a stored tensor (a
// stack's layer) at a time, then over "model". Every process asks in order(), so the collectives
// meet.
class WholeLayers {
 public:
  WholeLayers(NamedTensors held, const nn::GptConfig& model, bool stacked, int64_t data_shards)
      : held_(std::move(held)),
        stored_(stored_types(model, stacked)),
        splits_(nn::gpt_model_splits(model)),
        model_processes_(model.model_parallel),
        data_shards_(data_shards) {
    for (const auto& [name, layers] : stored_parts(model, stacked)) {
      for (size_t i = 0; i < layers.size(); ++i) {
        where_[layers[i]] = {name, static_cast<int64_t>(i)};
        order_.push_back(layers[i]);
      }
    }
  }
  const std::vector<std::string>& order() const { return order_; }
  // Whether a tensor is gathered from other processes (else nothing here is collective).
  bool gathers() const { return data_shards_ > 1 || model_processes_ > 1; }

  Array operator()(const std::string& name) {
    if (next_ >= order_.size() || order_[next_] != name) {
      throw Error(
          fmt::format("[train] internal: {} was asked for out of order(); the processes' "
                      "gathers would not meet",
                      name));
    }
    ++next_;
    const Place& at = where_.at(name);
    return whole_over_model(splits_, model_processes_, name, Tensor(whole_over_data(at, name)))
        .array();
  }

 private:
  struct Place {
    std::string stored;  // the stored tensor holding it
    int64_t layer = 0;   // its row there, when that is a stack
  };
  // This process's shard of `name` whole over "data": a stack's layer alone, gathered from each
  // process's part of it, never the stack.
  Array whole_over_data(const Place& at, const std::string& name) const {
    const Tensor& mine = held_.at(at.stored);
    const TensorType& stored = stored_.at(at.stored);
    if (at.stored != name) {
      return data_shards_ > 1 ? gather_layer(at.stored, mine, stored, at.layer)
                              : row(mine.array(), at.layer);
    }
    if (data_shards_ == 1) return mine.array();
    return gather_moments({{name, mine}}, {{name, stored}}).at(name).array();
  }
  // Row `i` of a stack [layers, ...], copied.
  static Array row(const Array& stack, int64_t i) {
    const Shape shape(stack.shape().begin() + 1, stack.shape().end());
    Array out = Array::uninitialized(stack.dtype(), shape);
    std::memcpy(out.data(), stack.data() + i * out.nbytes(), static_cast<size_t>(out.nbytes()));
    return out;
  }

  NamedTensors held_;
  std::map<std::string, TensorType> stored_;
  std::map<std::string, nn::ModelSplit> splits_;
  int64_t model_processes_, data_shards_;
  std::map<std::string, Place> where_;
  std::vector<std::string> order_;
  size_t next_ = 0;  // of order_
};

// The files' tensors: parts whole and per layer as held (on the `writer`), the rest streamed
// from WholeLayers. `p`, `m`, `v`: the state's tensors, host copies maybe started.
CheckpointData checkpoint_source(const NamedTensors& p, const NamedTensors& m,
                                 const NamedTensors& v, const TrainState& state,
                                 const nn::GptConfig& model, bool writer) {
  CheckpointData d;
  d.model_types = per_layer_types(model);
  d.optimizer_types = optimizer_types(d.model_types);
  const int64_t M = model.model_parallel, P = state.shards.parameters, S = state.shards.moments;
  if (state.stacked || P > 1 || M > 1) {
    auto source = std::make_shared<WholeLayers>(p, model, state.stacked, P);
    if (writer || source->gathers()) {
      d.model_order = source->order();
      d.model_tensor = [source](const std::string& name) { return (*source)(name); };
    }
  } else if (writer) {
    for (const auto& [name, t] : p) d.model[name] = t.array();
  }
  if (state.stacked || S > 1 || M > 1) {
    auto first = std::make_shared<WholeLayers>(m, model, state.stacked, S);
    auto second = std::make_shared<WholeLayers>(v, model, state.stacked, S);
    if (writer || first->gathers()) {
      for (const std::string& name : first->order()) d.optimizer_order.push_back(name + kExpAvg);
      for (const std::string& name : second->order()) d.optimizer_order.push_back(name + kExpAvgSq);
      d.optimizer_tensor = [first, second](const std::string& name) {
        return (name.ends_with(kExpAvgSq) ? *second : *first)(moment_parameter(name));
      };
    }
  } else if (writer) {
    for (const auto& [name, t] : m) d.optimizer[name + kExpAvg] = t.array();
    for (const auto& [name, t] : v) d.optimizer[name + kExpAvgSq] = t.array();
  }
  return d;
}

}  // namespace

void state_to_checkpoint(const TrainState& state, const nn::GptConfig& model, CheckpointData& d) {
  // Every copy starts before the first is waited for: they overlap.
  const NamedTensors held[] = {state.params.tensors(), state.m.tensors(), state.v.tensors()};
  for (const NamedTensors& part : held) start_host_copies(part);
  CheckpointData source = checkpoint_source(held[0], held[1], held[2], state, model, true);
  source.step = d.step;
  source.trainer = std::move(d.trainer);
  d = std::move(source);
}

void send_moments_for_checkpoint(const TrainState& state, const nn::GptConfig& model) {
  // The writer's gathers, in its order: the model file, then the optimizer's.
  const CheckpointData d = checkpoint_source(state.params.tensors(), state.m.tensors(),
                                             state.v.tensors(), state, model, false);
  if (d.model_tensor) {
    for (const std::string& name : d.model_order) d.model_tensor(name);
  }
  if (d.optimizer_tensor) {
    for (const std::string& name : d.optimizer_order) d.optimizer_tensor(name);
  }
}

void parameters_into_state(const std::map<std::string, TensorType>& given,
                           const std::function<Array(const std::string&)>& tensor,
                           const nn::GptConfig& model, TrainState& state) {
  const std::map<std::string, TensorType> params = per_layer_types(model);
  for (const auto& [name, t] : given) {
    const auto it = params.find(name);
    if (it == params.end() || it->second != t) {
      throw Error(
          fmt::format("[train] internal: {} {} is not a parameter of this model; check "
                      "the tensors given first",
                      name, t.str()));
    }
  }
  fill(state.params, model, state.stacked, state.shards.parameters, tensor,
       [&given](const std::string& name) { return given.count(name) > 0; });
}

void checkpoint_into_state(const CheckpointData& d, const nn::GptConfig& model,
                           const std::string& dir, TrainState& state) {
  // Both files are checked before anything is written, so a file of another model leaves the
  // state as it was.
  const std::map<std::string, TensorType> params = per_layer_types(model);
  const std::string model_file = dir + "/model.safetensors";
  const std::string optimizer_file = dir + "/optimizer.safetensors";
  if (d.model_tensor) {
    check_tensors(params, d.model_types, model_file);
  } else {
    check_tensors(params, d.model, model_file);
  }
  if (d.optimizer_tensor) {
    check_tensors(optimizer_types(params), d.optimizer_types, optimizer_file);
  } else {
    check_tensors(optimizer_types(params), d.optimizer, optimizer_file);
  }
  auto in_model = [&](const std::string& name) {
    return d.model_tensor ? d.model_tensor(name) : d.model.at(name);
  };
  auto in_optimizer = [&](const std::string& name) {
    return d.optimizer_tensor ? d.optimizer_tensor(name) : d.optimizer.at(name);
  };
  const StateShards& n = state.shards;
  fill(state.params, model, state.stacked, n.parameters, in_model);
  fill(state.m, model, state.stacked, n.moments,
       [&](const std::string& name) { return in_optimizer(name + kExpAvg); });
  fill(state.v, model, state.stacked, n.moments,
       [&](const std::string& name) { return in_optimizer(name + kExpAvgSq); });
  if (d.check_read) d.check_read();
}

}  // namespace keel::train
