// GptConfig as JSON (for --config files, trainer.json and run records) and its validation.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ir/error.h"
#include "nn/gpt.h"
#include "nn/gpt_sizes.h"

namespace keel::nn {

namespace {

// The first dense MLP's input weight: what a split of the dimension mlp would cut first.
std::string dense_mlp_name(const GptConfig& c) {
  for (int64_t i = 0; i < c.layers; ++i) {
    if (!c.is_moe_layer(i)) return fmt::format("h.{}.mlp.c_fc.weight", i);
  }
  return "mtp.1.mlp.c_fc.weight";
}

// The first MoE layer's prefix: what a split of the dimension experts would cut first.
std::string first_moe_name(const GptConfig& c) {
  for (int64_t i = 0; i < c.layers; ++i) {
    if (c.is_moe_layer(i)) return fmt::format("h.{}", i);
  }
  return "h.0";
}

}  // namespace

bool GptConfig::is_moe_layer(int64_t i) const {
  if (!moe_layer_ids.empty()) {
    return std::binary_search(moe_layer_ids.begin(), moe_layer_ids.end(), i);
  }
  return moe_every > 0 && i % moe_every == moe_every - 1;
}

bool GptConfig::is_engram_layer(int64_t i) const {
  return std::binary_search(engram_layer_ids.begin(), engram_layer_ids.end(), i);
}

bool GptConfig::is_mamba_layer(int64_t i) const {
  return std::binary_search(mamba_layer_ids.begin(), mamba_layer_ids.end(), i);
}

bool GptConfig::is_sparse_attention_layer(int64_t i) const {
  return std::binary_search(sparse_attention_layer_ids.begin(), sparse_attention_layer_ids.end(),
                            i);
}

namespace {

// The layer lists `pattern` gives a model of `layers` layers (the letters of GptConfig's
// block_pattern); keel::InputError naming `source` for a bad letter or length.
struct PatternLayers {
  std::vector<int64_t> moe, sparse, mamba, engram;
};
PatternLayers pattern_layers(const std::string& pattern, int64_t layers,
                             const std::string& source) {
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format("[nn] {}: field 'block_pattern': {}", source, what));
  };
  const auto n = static_cast<int64_t>(pattern.size());
  if (n < 1) throw bad("it is empty; give one letter per layer, e.g. \"SEMN\"");
  if (layers % n != 0) {
    throw bad(fmt::format(
        "\"{}\" has {} letters, which must divide layers ({}); give layers a multiple of {}, or "
        "another block_pattern or the layer lists",
        pattern, n, layers, n));
  }
  PatternLayers out;
  for (int64_t i = 0; i < layers; ++i) {
    switch (pattern[static_cast<size_t>(i % n)]) {
      case 'A':
        break;
      case 'S':
        out.sparse.push_back(i);
        break;
      case 'E':
        out.moe.push_back(i);
        break;
      case 'M':
        out.mamba.push_back(i);
        break;
      case 'N':
        out.engram.push_back(i);
        break;
      default:
        throw bad(fmt::format(
            "'{}' at {} is not a block: A attention, S sparse attention, E experts, M Mamba-2, N "
            "n-gram memory",
            pattern[static_cast<size_t>(i % n)], i % n));
    }
  }
  return out;
}

}  // namespace

void GptConfig::apply_block_pattern(const std::string& source) {
  const PatternLayers l = pattern_layers(block_pattern, layers, source);
  moe_every = 0;
  moe_layer_ids = l.moe;
  sparse_attention_layer_ids = l.sparse;
  mamba_layer_ids = l.mamba;
  engram_layer_ids = l.engram;
}

int64_t GptConfig::moe_layers() const {
  if (!moe_layer_ids.empty()) return static_cast<int64_t>(moe_layer_ids.size());
  return moe_every > 0 ? layers / moe_every : 0;
}

std::string GptConfig::to_json() const {
  nlohmann::ordered_json j = {
      {"name", name},   {"vocab", vocab},         {"layers", layers}, {"width", width},
      {"heads", heads}, {"kv_heads", kv()},       {"seq", seq},       {"batch", batch},
      {"norm", norm},   {"positions", positions}, {"mlp", mlp},       {"mlp_hidden", hidden()},
      {"bias", bias}};
  // Dense configs keep the JSON (and so the calibration and resume keys) they always had.
  const bool pattern = !block_pattern.empty();  // it gives the layer lists
  if (pattern) j["block_pattern"] = block_pattern;
  // Lists that replaced a preset's pattern are written even when empty: without them, reading
  // the JSON back would apply the preset's pattern again.
  const std::vector<std::string>& presets = gpt_preset_names();
  const bool replaced = !pattern &&
                        std::find(presets.begin(), presets.end(), name) != presets.end() &&
                        !gpt_preset(name).block_pattern.empty();
  if (replaced) {
    if (moe_every == 0) j["moe_layers"] = moe_layer_ids;
    j["sparse_attention_layers"] = sparse_attention_layer_ids;
    j["mamba_layers"] = mamba_layer_ids;
    j["engram_layers"] = engram_layer_ids;
  }
  if (moe_layers() > 0) {
    if (moe_every > 0) j["moe_every"] = moe_every;
    if (!moe_layer_ids.empty() && !pattern) j["moe_layers"] = moe_layer_ids;
    j["moe"] = {{"experts", moe.experts},
                {"top_k", moe.top_k},
                {"capacity_factor", moe.capacity_factor},
                {"hidden", moe.hidden},
                {"shared_expert", moe.shared_expert},
                {"router_z_weight", moe.router_z_weight},
                {"balance_weight", moe.balance_weight}};
  }
  if (!engram_layer_ids.empty()) {
    if (!pattern) j["engram_layers"] = engram_layer_ids;
    j["engram"] = {{"orders", engram.orders},
                   {"heads", engram.heads},
                   {"rows", engram.rows},
                   {"dim", engram.dim}};
  }
  if (!sparse_attention_layer_ids.empty()) {
    if (!pattern) j["sparse_attention_layers"] = sparse_attention_layer_ids;
    j["sparse_attention"] = {{"keys", sparse_attention.keys},
                             {"window", sparse_attention.window},
                             {"indexer_heads", sparse_attention.indexer_heads},
                             {"indexer_dim", sparse_attention.indexer_dim}};
  }
  if (!mamba_layer_ids.empty()) {
    if (!pattern) j["mamba_layers"] = mamba_layer_ids;
    j["mamba"] = {{"state", mamba.state},
                  {"head_dim", mamba.head_dim},
                  {"expand", mamba.expand},
                  {"conv", mamba.conv},
                  {"chunk", mamba.chunk}};
  }
  if (!mtp_weights.empty()) j["mtp_weights"] = mtp_weights;
  return j.dump();
}

namespace {

// Typed reads of one JSON value; a wrong type is an InputError starting with `where` (the file
// and the field).
struct Field {
  const nlohmann::json& v;
  std::string where;
  [[noreturn]] void bad(const char* what) const {
    throw InputError(fmt::format("{} must be {}", where, what));
  }
  void read(int64_t& out) const {
    if (!v.is_number_integer()) bad("an integer");
    out = v.get<int64_t>();
  }
  void read(double& out) const {
    if (!v.is_number()) bad("a number");
    out = v.get<double>();
  }
  void read(bool& out) const {
    if (!v.is_boolean()) bad("a boolean");
    out = v.get<bool>();
  }
  void read(std::string& out) const {
    if (!v.is_string()) bad("a string");
    out = v.get<std::string>();
  }
};

void read_moe(const nlohmann::json& j, const std::string& source, MoeConfig& m) {
  const std::string at = fmt::format("[nn] {}: field 'moe'", source);
  if (!j.is_object()) throw InputError(at + ": expected an object");
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    Field f{item.value(), fmt::format("{}: '{}'", at, key)};
    if (key == "experts")
      f.read(m.experts);
    else if (key == "top_k")
      f.read(m.top_k);
    else if (key == "capacity_factor")
      f.read(m.capacity_factor);
    else if (key == "hidden")
      f.read(m.hidden);
    else if (key == "router_z_weight")
      f.read(m.router_z_weight);
    else if (key == "balance_weight")
      f.read(m.balance_weight);
    else if (key == "shared_expert")
      f.read(m.shared_expert);
    else
      throw InputError(
          fmt::format("{}: unknown field '{}'; fields: experts, top_k, capacity_factor, hidden, "
                      "shared_expert, router_z_weight, balance_weight",
                      at, key));
  }
}

void read_engram(const nlohmann::json& j, const std::string& source, EngramConfig& e) {
  const std::string at = fmt::format("[nn] {}: field 'engram'", source);
  if (!j.is_object()) throw InputError(at + ": expected an object");
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    Field f{item.value(), fmt::format("{}: '{}'", at, key)};
    if (key == "orders") {
      if (!f.v.is_array()) f.bad("a list of n-gram orders, ascending");
      e.orders.clear();
      for (const nlohmann::json& n : f.v) Field{n, f.where}.read(e.orders.emplace_back());
    } else if (key == "heads") {
      f.read(e.heads);
    } else if (key == "rows") {
      f.read(e.rows);
    } else if (key == "dim") {
      f.read(e.dim);
    } else {
      throw InputError(
          fmt::format("{}: unknown field '{}'; fields: orders, heads, rows, dim", at, key));
    }
  }
}

void read_sparse_attention(const nlohmann::json& j, const std::string& source,
                           SparseAttentionConfig& s) {
  const std::string at = fmt::format("[nn] {}: field 'sparse_attention'", source);
  if (!j.is_object()) throw InputError(at + ": expected an object");
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    Field f{item.value(), fmt::format("{}: '{}'", at, key)};
    if (key == "keys") {
      f.read(s.keys);
    } else if (key == "window") {
      f.read(s.window);
    } else if (key == "indexer_heads") {
      f.read(s.indexer_heads);
    } else if (key == "indexer_dim") {
      f.read(s.indexer_dim);
    } else {
      throw InputError(fmt::format(
          "{}: unknown field '{}'; fields: keys, window, indexer_heads, indexer_dim", at, key));
    }
  }
}

void read_mamba(const nlohmann::json& j, const std::string& source, MambaConfig& m) {
  const std::string at = fmt::format("[nn] {}: field 'mamba'", source);
  if (!j.is_object()) throw InputError(at + ": expected an object");
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    Field f{item.value(), fmt::format("{}: '{}'", at, key)};
    if (key == "state") {
      f.read(m.state);
    } else if (key == "head_dim") {
      f.read(m.head_dim);
    } else if (key == "expand") {
      f.read(m.expand);
    } else if (key == "conv") {
      f.read(m.conv);
    } else if (key == "chunk") {
      f.read(m.chunk);
    } else {
      throw InputError(fmt::format(
          "{}: unknown field '{}'; fields: state, head_dim, expand, conv, chunk", at, key));
    }
  }
}

// A JSON list of layer indices (checked by check_layers).
void read_layers(const Field& f, std::vector<int64_t>& out) {
  if (!f.v.is_array()) f.bad("a list of layer indices, ascending");
  out.clear();
  for (const nlohmann::json& i : f.v) Field{i, f.where}.read(out.emplace_back());
}

// Layer indices ascending in 0..layers-1, else the error naming `field`.
template <class Bad>
void check_layers(const std::vector<int64_t>& ids, int64_t layers, const char* field,
                  const Bad& bad) {
  for (size_t k = 0; k < ids.size(); ++k) {
    const int64_t i = ids[k];
    if (i < 0 || i >= layers || (k > 0 && i <= ids[k - 1])) {
      throw bad(fmt::format("{} must be ascending layer indices in 0..{}, got {} at {}", field,
                            layers - 1, i, k));
    }
  }
}

}  // namespace

GptConfig GptConfig::from_json(const std::string& text, const std::string& source,
                               int64_t min_vocab) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw InputError(fmt::format("[nn] {}: not JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("[nn] {}: expected a JSON object", source));
  // A config starts from its named preset (or gpt2-s), then takes the fields it gives.
  std::string preset = "gpt2-s";
  if (auto it = j.find("name"); it != j.end()) {
    Field{*it, fmt::format("[nn] {}: field 'name'", source)}.read(preset);
    const std::vector<std::string>& names = gpt_preset_names();
    if (std::find(names.begin(), names.end(), preset) == names.end()) {
      throw InputError(fmt::format("[nn] {}: field 'name' is \"{}\", not a preset; presets: {}",
                                   source, preset, fmt::join(names, ", ")));
    }
  }
  GptConfig c = gpt_preset(preset);
  // A pattern (the preset's or the config's) sets the layer lists; lists the config gives
  // replace a preset's pattern and what it set, and beside the config's own are refused.
  const bool lists = j.contains("moe_every") || j.contains("moe_layers") ||
                     j.contains("sparse_attention_layers") || j.contains("mamba_layers") ||
                     j.contains("engram_layers");
  if (lists && j.contains("block_pattern")) {
    throw InputError(fmt::format(
        "[nn] {}: field 'block_pattern' sets every layer's kind; give it or the layer lists "
        "(moe_every, moe_layers, sparse_attention_layers, mamba_layers, engram_layers), not both",
        source));
  }
  if (lists && !c.block_pattern.empty()) {
    c.block_pattern.clear();
    c.moe_layer_ids.clear();
    c.sparse_attention_layer_ids.clear();
    c.mamba_layer_ids.clear();
    c.engram_layer_ids.clear();
  }
  for (const auto& item : j.items()) {
    const std::string key = item.key();
    const nlohmann::json& v = item.value();
    Field f{v, fmt::format("[nn] {}: field '{}'", source, key)};
    if (key == "name")
      f.read(c.name);
    else if (key == "vocab")
      f.read(c.vocab);
    else if (key == "layers")
      f.read(c.layers);
    else if (key == "width")
      f.read(c.width);
    else if (key == "heads")
      f.read(c.heads);
    else if (key == "kv_heads")
      f.read(c.kv_heads);
    else if (key == "seq")
      f.read(c.seq);
    else if (key == "batch")
      f.read(c.batch);
    else if (key == "norm")
      f.read(c.norm);
    else if (key == "positions")
      f.read(c.positions);
    else if (key == "mlp")
      f.read(c.mlp);
    else if (key == "mlp_hidden")
      f.read(c.mlp_hidden);
    else if (key == "bias")
      f.read(c.bias);
    else if (key == "moe_every")
      f.read(c.moe_every);
    else if (key == "moe_layers") {
      read_layers(f, c.moe_layer_ids);
      if (!j.contains("moe_every")) c.moe_every = 0;  // the list replaces the preset's pattern
    } else if (key == "moe")
      read_moe(v, source, c.moe);
    else if (key == "engram_layers")
      read_layers(f, c.engram_layer_ids);
    else if (key == "engram")
      read_engram(v, source, c.engram);
    else if (key == "mamba_layers")
      read_layers(f, c.mamba_layer_ids);
    else if (key == "mamba")
      read_mamba(v, source, c.mamba);
    else if (key == "sparse_attention_layers")
      read_layers(f, c.sparse_attention_layer_ids);
    else if (key == "sparse_attention")
      read_sparse_attention(v, source, c.sparse_attention);
    else if (key == "block_pattern")
      f.read(c.block_pattern);
    else if (key == "mtp_weights") {
      if (!v.is_array()) f.bad("a list of numbers, one per depth");
      c.mtp_weights.clear();
      for (const nlohmann::json& w : v) Field{w, f.where}.read(c.mtp_weights.emplace_back());
    } else {
      throw InputError(fmt::format(
          "[nn] {}: unknown field '{}'; fields: name, vocab, layers, width, heads, kv_heads, "
          "seq, batch, norm, positions, mlp, mlp_hidden, bias, moe_every, moe_layers, moe, "
          "engram_layers, engram, mamba_layers, mamba, sparse_attention_layers, "
          "sparse_attention, block_pattern, mtp_weights",
          source, key));
    }
  }
  if (!c.block_pattern.empty() || j.contains("block_pattern")) c.apply_block_pattern(source);
  c.validate(source, min_vocab);
  return c;
}

void GptConfig::validate(const std::string& source, int64_t min_vocab) const {
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format("[nn] {}: {}", source, what));
  };
  if (vocab < min_vocab) {
    throw bad(fmt::format(
        "field 'vocab' must be at least {} (an embedding row for every token the data holds), "
        "got {}",
        min_vocab, vocab));
  }
  if (vocab < 2 || layers < 1 || width < 1 || heads < 1 || seq < 1 || batch < 1) {
    throw bad("vocab >= 2 and layers, width, heads, seq, batch >= 1 are required");
  }
  if (width % heads != 0)
    throw bad(fmt::format("width {} is not a multiple of heads {}", width, heads));
  if (kv() < 1 || heads % kv() != 0) {
    throw bad(fmt::format("heads {} must be a multiple of kv_heads {}", heads, kv()));
  }
  if (norm != "layernorm" && norm != "rmsnorm") throw bad("norm must be layernorm or rmsnorm");
  if (positions != "learned" && positions != "rotary") {
    throw bad("positions must be learned or rotary");
  }
  if (positions == "rotary" && (width / heads) % 2 != 0)
    throw bad("rotary needs an even head width");
  if (mlp != "gelu" && mlp != "swiglu") throw bad("mlp must be gelu or swiglu");
  // hidden() would multiply before the sizes are checked: test the field itself.
  if (mlp_hidden < 0) throw bad("mlp_hidden must be >= 1 (or 0: 4 x width)");
  if (moe_every < 0 || moe_every > layers) {
    throw bad(fmt::format("moe_every must be in 0..layers ({}), got {}", layers, moe_every));
  }
  if (moe_every > 0 && !moe_layer_ids.empty()) {
    throw bad("give moe_every or moe_layers, not both");
  }
  if (!block_pattern.empty()) {
    const PatternLayers l = pattern_layers(block_pattern, layers, source);
    if (l.moe != moe_layer_ids || moe_every != 0 || l.sparse != sparse_attention_layer_ids ||
        l.mamba != mamba_layer_ids || l.engram != engram_layer_ids) {
      throw bad(fmt::format(
          "field 'block_pattern' \"{}\" and the layer lists disagree; set the lists with "
          "apply_block_pattern, or clear the pattern",
          block_pattern));
    }
  }
  check_layers(moe_layer_ids, layers, "moe_layers", bad);
  if (moe_layers() > 0) moe.validate(source);
  check_layers(mamba_layer_ids, layers, "mamba_layers", bad);
  if (!mamba_layer_ids.empty()) mamba.validate(source, width);
  check_layers(sparse_attention_layer_ids, layers, "sparse_attention_layers", bad);
  if (!sparse_attention_layer_ids.empty()) {
    sparse_attention.validate(source, seq);
    for (int64_t i : sparse_attention_layer_ids) {
      if (is_mamba_layer(i)) {
        throw bad(fmt::format(
            "field 'sparse_attention_layers': layer {} is also in mamba_layers, whose mixer "
            "has no attention to make sparse; list it in one of them",
            i));
      }
    }
  }
  check_layers(engram_layer_ids, layers, "engram_layers", bad);
  if (!engram_layer_ids.empty()) {
    engram.validate(source);
    // The hash multiplies a residue below 2^31 by vocab + 1 (nn/engram.cpp).
    if (vocab >= (int64_t{1} << 31) - 1) {
      throw bad(
          fmt::format("field 'vocab' must be below 2^31 - 1 with engram_layers, got {}", vocab));
    }
  }
  if (mtp_depth() > 3) {
    throw bad(fmt::format("mtp_weights: at most 3 depths, got {}", mtp_depth()));
  }
  for (size_t d = 0; d < mtp_weights.size(); ++d) {
    if (!(mtp_weights[d] >= 0)) {
      throw bad(fmt::format("mtp_weights must be >= 0, got {} at depth {}", mtp_weights[d], d + 1));
    }
  }
  if (model_parallel < 1) throw bad(fmt::format("model_parallel {} must be >= 1", model_parallel));
  if (model_parallel > 1) {
    const int64_t M = model_parallel;
    if (!splits_any()) {
      throw bad(fmt::format(
          "the blocks split over {} processes of mesh axis 'model', but neither the heads nor "
          "the MLP's hidden units nor the n-gram memories' rows nor the experts nor the "
          "vocabulary are split (sharding.rules); map heads, mlp, memory, experts or vocab to "
          "'model'",
          M));
    }
    if (split_vocab && vocab % M != 0) {
      throw bad(fmt::format(
          "wte.weight: dimension vocab ({} tokens) does not split over {} processes of mesh "
          "axis 'model'; give 'model' a size that divides it, set vocab to a multiple of {} "
          "(rows no token reads), or drop vocab=model from sharding.rules",
          vocab, M, M));
    }
    if (split_experts && moe_layers() == 0) {
      throw bad(
          "sharding.rules maps experts to mesh axis 'model', which shards nothing here: the "
          "model has no MoE layer; drop experts=model");
    }
    if (split_experts && moe.experts % M != 0) {
      throw bad(fmt::format(
          "{}.moe.experts.c_fc.weight: dimension experts ({} experts) does not split over {} "
          "processes of mesh axis 'model'; give 'model' a size that divides it, or drop "
          "experts=model from sharding.rules",
          first_moe_name(*this), moe.experts, M));
    }
    if (split_memory && engram_layer_ids.empty()) {
      throw bad(
          "sharding.rules maps memory to mesh axis 'model', which shards nothing here: the model "
          "has no n-gram memory layer; drop memory=model");
    }
    if (split_memory && engram.tables() * engram.rows % M != 0) {
      throw bad(fmt::format(
          "h.{}.engram.table: dimension memory ({} tables of {} rows) does not split over {} "
          "processes of mesh axis 'model'; give 'model' a size that divides {}, or drop "
          "memory=model from sharding.rules",
          engram_layer_ids.front(), engram.tables(), engram.rows, M,
          engram.tables() * engram.rows));
    }
    if (split_heads && !mamba_layer_ids.empty()) {
      const int64_t H = mamba.expand * width / mamba.head_dim;
      if (H % M != 0 || mamba.state % M != 0) {
        throw bad(fmt::format(
            "h.{}.mamba.in_proj.weight: dimension heads ({} Mamba-2 heads, state {}) does not "
            "split over {} processes of mesh axis 'model'; give 'model' a size that divides "
            "both, or split the MLPs alone (sharding.rules = [\"mlp=model\"])",
            mamba_layer_ids.front(), H, mamba.state, M));
      }
    }
    if (split_heads && has_attention() && (heads % M != 0 || kv() % M != 0)) {
      throw bad(fmt::format(
          "h.0.attn.c_attn.weight: dimension heads ({} query heads, {} kv heads) does not split "
          "over {} processes of mesh axis 'model'; give 'model' a size that divides both, or "
          "drop heads=model from sharding.rules",
          heads, kv(), M));
    }
    if (split_mlp && !has_dense_mlp()) {
      throw bad(
          "sharding.rules maps mlp to mesh axis 'model', which shards nothing here: every "
          "feed-forward layer is MoE (experts=model splits experts); drop mlp=model");
    }
    if (split_mlp && hidden() % M != 0) {
      throw bad(fmt::format(
          "{}: dimension mlp ({} hidden units) does not split over {} processes of mesh axis "
          "'model'; give 'model' a size that divides it, or drop mlp=model from sharding.rules",
          dense_mlp_name(*this), hidden(), M));
    }
  }
  check_gpt_sizes(*this, source);
}

}  // namespace keel::nn
