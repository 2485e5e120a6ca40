// The model as a launch lays it out (laid_out_model.h).
#include "train/laid_out_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>

#include "data/batch.h"
#include "ir/error.h"
#include "nn/tensor_parallel.h"
#include "policy/layer_layout.h"
#include "trace/scan.h"

namespace keel::train {
namespace {

policy::LayerLayout layer_layout(const Runtime& rt) {
  return *policy::parse_layer_layout(rt.policy().string("launch.layer_layout"));
}

// experts=data (expert parallelism): the routed experts are ZeRO stage 3's slices, a block of
// experts per process, given to the MoE layers per source in the one-program step.
void spread_experts(const Runtime& rt, const std::string& rule, int64_t processes,
                    nn::GptConfig& model) {
  auto refuse = [&](const std::string& why) {
    return InputError(fmt::format("[train] sharding.rules {}: {}", rule, why));
  };
  if (model.moe_layers() == 0) {
    throw refuse("it shards nothing here: the model has no MoE layer; drop the rule");
  }
  if (model.moe.experts % processes != 0) {
    int64_t first = 0;
    while (!model.is_moe_layer(first)) ++first;
    throw refuse(fmt::format(
        "h.{}.moe.experts.c_fc.weight: dimension experts ({} experts) does not split over {} "
        "processes of mesh axis 'data'; run a number of processes that divides it",
        first, model.moe.experts, processes));
  }
  if (rt.policy().integer("sharding.zero") != 3) {
    throw refuse(fmt::format(
        "the experts are held as ZeRO stage 3's slices of them, and sharding.zero is {}; add "
        "--set sharding.zero=3",
        rt.policy().integer("sharding.zero")));
  }
  if (model.layout.scanned || model.layout.split_every > 0) {
    throw refuse(fmt::format(
        "expert parallelism runs in the unrolled one-program step, and launch.layer_layout is "
        "{}; set launch.layer_layout=unrolled",
        rt.policy().string("launch.layer_layout")));
  }
  if (rt.mesh().axis_size(nn::kModelAxis) > 1) {
    throw refuse(fmt::format("it runs with a 'model' axis of one device, and the mesh is {}",
                             rt.mesh().str()));
  }
  model.experts_over_data = true;
}

// The dimensions sharding.rules splits over mesh axes of more than one device: heads, mlp,
// memory, experts and vocab over "model" and experts over "data" are built; embed and head_dim
// are refused.
void apply_sharding_rules(const Runtime& rt, nn::GptConfig& model) {
  model.split_heads = model.split_mlp = model.split_memory = model.split_experts =
      model.split_vocab = model.experts_over_data = false;
  // The default's mlp rule passes over a model whose every feed-forward is MoE; a rule the
  // launch gives that shards nothing is refused (GptConfig::validate). The heads rule always
  // splits something: attention's heads or Mamba-2's.
  const bool defaults =
      rt.policy().setting("sharding.rules").origin.source == policy::Origin::Source::fallback;
  for (const std::string& rule : rt.policy().strings("sharding.rules")) {
    const size_t eq = rule.find('=');  // the policy checked the form
    const std::string dimension = rule.substr(0, eq), axis = rule.substr(eq + 1);
    const int64_t size = rt.mesh().axis_size(axis);
    if (size <= 1) continue;  // an axis of one device (or none) splits nothing
    if (dimension == "experts" && axis == nn::kDataAxis) {
      spread_experts(rt, rule, size, model);
      continue;
    }
    if (axis != nn::kModelAxis) {
      throw InputError(fmt::format(
          "[train] sharding.rules {}: the mesh {} has {} devices on '{}', and keel train splits "
          "parameters over 'model' only ('data' splits the batch, and the experts with "
          "experts=data); map {} to model or drop the rule",
          rule, rt.mesh().str(), size, axis, dimension));
    }
    const std::map<std::string, bool*> built = {{"heads", &model.split_heads},
                                                {"mlp", &model.split_mlp},
                                                {"memory", &model.split_memory},
                                                {"experts", &model.split_experts},
                                                {"vocab", &model.split_vocab}};
    if (!built.count(dimension)) {
      throw InputError(fmt::format(
          "[train] sharding.rules {}: splitting {} over 'model' is not built (heads, mlp, "
          "memory, experts and vocab are); drop the rule",
          rule, dimension));
    }
    if (dimension == "mlp" && defaults && !model.has_dense_mlp()) continue;
    *built.at(dimension) = true;
  }
  if (model.model_parallel > 1 && !model.splits_any()) {
    throw InputError(fmt::format(
        "[train] the mesh {} has {} devices on 'model', and no rule of sharding.rules maps a "
        "dimension to it; add heads=model, mlp=model, memory=model, experts=model or vocab=model "
        "to sharding.rules",
        rt.mesh().str(), model.model_parallel));
  }
}

// The blocks split over the mesh axis "model" (nn/tensor_parallel.h) when the mesh has one
// of more than one device, as sharding.rules says, in any layer layout.
nn::GptConfig with_model_split(const Runtime& rt, nn::GptConfig model) {
  model.model_parallel = std::max<int64_t>(1, rt.mesh().axis_size(nn::kModelAxis));
  apply_sharding_rules(rt, model);
  if (model.model_parallel == 1) return model;
  model.validate("--preset/--config", data::kVocab);
  return model;
}

}  // namespace

nn::GptConfig laid_out_model(const Runtime& rt, nn::GptConfig model) {
  model.layout = layer_layout(rt);
  model.remat_layers = rt.policy().boolean("launch.remat_layers");
  if (model.remat_layers && !model.layout.scanned) {
    throw InputError(
        "[train] launch.remat_layers = true recomputes the layers of a scanned stack, and this "
        "launch does not scan its layers; add --set launch.layer_layout=scanned, or drop "
        "launch.remat_layers");
  }
  const std::string policy = rt.policy().string("launch.remat_policy");
  model.remat_policy = remat_policy_named(policy).value_or(RematPolicy::nothing_saveable);
  if (model.remat_policy != RematPolicy::nothing_saveable && !model.remat_layers) {
    throw InputError(
        fmt::format("[train] launch.remat_policy = {} says what a recomputed layer keeps, and "
                    "launch.remat_layers is false; add --set launch.remat_layers=true, or drop "
                    "launch.remat_policy",
                    policy));
  }
  return with_model_split(rt, model);
}

// Phase 1, data first: a bad corpus costs no compile.

}  // namespace keel::train
