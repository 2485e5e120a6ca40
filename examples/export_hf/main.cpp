// keel gpt2-* checkpoints to a Hugging Face GPT-2 directory (config.json + model.safetensors)
// and back. keel's gpt2 presets already name and lay out their tensors as transformers' GPT2Model
// does: Conv1D weights [in, out], q/k/v fused in c_attn, the head tied to wte and so stored once.
// Usage: export_hf to-hf CHECKPOINT_OR_RUN_DIR OUT_DIR | export_hf from-hf HF_DIR RUN_DIR
#include <keel/keel.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

using keel::nn::GptConfig;
using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw keel::InputError("[export_hf] " + where + ": " + what);
}

// GPT-2 is layernorm, learned positions, a GELU MLP 4x wide, biases, one KV head per head.
void require_gpt2(const GptConfig& c, const std::string& where) {
  if (c.norm != "layernorm" || c.positions != "learned" || c.mlp != "gelu" || !c.bias ||
      c.kv() != c.heads || c.hidden() != 4 * c.width || c.moe_layers() > 0 || c.mtp_depth() > 0 ||
      !c.engram_layer_ids.empty() || !c.mamba_layer_ids.empty() ||
      !c.sparse_attention_layer_ids.empty()) {
    fail(where, "model '" + c.name + "' is not GPT-2 (norm " + c.norm + ", positions " +
                    c.positions + ", mlp " + c.mlp +
                    "); only gpt2-* models export to the GPT-2 layout");
  }
}

json hf_config(const GptConfig& c) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", c.vocab},
          {"n_positions", c.seq},
          {"n_ctx", c.seq},
          {"n_embd", c.width},
          {"n_layer", c.layers},
          {"n_head", c.heads},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"tie_word_embeddings", true},
          {"bos_token_id", 0},
          {"eos_token_id", 0},
          {"torch_dtype", "float32"},
          {"keel_config", json::parse(c.to_json())}};
}

// The GPT-2 fields decide; keel's own config (batch, preset name), when present, fills the rest.
GptConfig from_hf_config(const json& j, const std::string& where) {
  auto need = [&](const char* field, const json& want) {
    if (!j.contains(field) || j[field] != want)
      fail(where, std::string("\"") + field + "\" must be " + want.dump());
  };
  need("model_type", "gpt2");
  need("activation_function", "gelu_new");
  need("layer_norm_epsilon", 1e-5);
  if (j.value("tie_word_embeddings", true) != true) fail(where, "keel's head is tied to wte");
  json k = j.value("keel_config", json{{"name", "gpt2-s"}});
  for (auto [hf, keel_field] : {std::pair{"vocab_size", "vocab"},
                                {"n_positions", "seq"},
                                {"n_embd", "width"},
                                {"n_layer", "layers"},
                                {"n_head", "heads"}}) {
    if (!j.contains(hf) || !j[hf].is_number_integer())
      fail(where, std::string("\"") + hf + "\" must be an integer");
    k[keel_field] = j[hf];
  }
  k["kv_heads"] = k["heads"];
  k["mlp_hidden"] =
      j["n_inner"].is_null() ? 4 * j["n_embd"].get<int64_t>() : j["n_inner"].get<int64_t>();
  GptConfig c = GptConfig::from_json(k.dump(), where, 256);  // byte tokens need 256
  require_gpt2(c, where);
  return c;
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) fail(p.string(), "cannot be read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json parse(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(where, "not a JSON object");
  return j;
}

void to_hf(const std::string& from, const std::string& out) {
  keel::train::FoundCheckpoint ck = keel::train::read_checkpoint_or_newest(from);
  const std::string where = ck.dir + "/trainer.json";
  json trainer = parse(ck.data.trainer, where);
  if (!trainer.contains("config")) fail(where, "has no \"config\"");
  GptConfig c = GptConfig::from_json(trainer["config"].dump(), where + " field \"config\"", 256);
  require_gpt2(c, where);
  std::map<std::string, keel::TensorType> want;
  for (const auto& [name, shape] : keel::nn::gpt_param_shapes(c))
    want[name] = {keel::DType::f32, shape};
  keel::train::check_tensors(want, ck.data.model, ck.dir + "/model.safetensors");
  std::filesystem::create_directories(out);
  keel::train::write_safetensors(out + "/model.safetensors", ck.data.model);
  keel::files::publish_file(out + "/config.json", hf_config(c).dump(2) + "\n");
  std::printf("wrote %s (config.json, model.safetensors: %zu tensors of step %lld)\n", out.c_str(),
              ck.data.model.size(), (long long)ck.data.step);
}

bool same_bytes(const keel::Array& a, const keel::train::TensorMap& m, const std::string& name) {
  auto it = m.find(name);
  return it != m.end() && it->second.dtype() == a.dtype() && it->second.shape() == a.shape() &&
         std::memcmp(it->second.data(), a.data(), a.nbytes()) == 0;
}

void from_hf(const std::string& dir, const std::string& run_dir) {
  const std::string config_path = dir + "/config.json";
  GptConfig c = from_hf_config(parse(read_text(config_path), config_path), config_path);
  keel::train::SafetensorsFile st = keel::train::read_safetensors(dir + "/model.safetensors");
  keel::train::CheckpointData ck;
  for (auto& [name, value] : st.tensors) {  // transformers' GPT2LMHeadModel prefixes "transformer."
    std::string bare = name.starts_with("transformer.") ? name.substr(12) : name;
    if (bare != "lm_head.weight") ck.model.emplace(bare, value);
  }
  if (auto head = st.tensors.find("lm_head.weight");
      head != st.tensors.end() && !same_bytes(head->second, ck.model, "wte.weight")) {
    fail(dir + "/model.safetensors", "lm_head.weight differs from wte.weight; keel's head is tied");
  }
  std::map<std::string, keel::TensorType> want;
  for (const auto& [name, shape] : keel::nn::gpt_param_shapes(c)) {
    want[name] = {keel::DType::f32, shape};
    ck.optimizer.emplace(name + ".exp_avg", keel::Array::full(shape, 0.0));
    ck.optimizer.emplace(name + ".exp_avg_sq", keel::Array::full(shape, 0.0));
  }
  keel::train::check_tensors(want, ck.model, dir + "/model.safetensors");
  // Step 0 with a fresh data cursor: `keel sample` reads it, `keel train --resume` fine-tunes it.
  ck.trainer = json{{"format", keel::Formats::checkpoint}, {"step", 0},  {"cursor", {{"row", 0}}},
                    {"config", json::parse(c.to_json())},  {"accum", 1}, {"seed", 0}}
                   .dump(2);
  std::printf("wrote %s\n", keel::train::write_checkpoint(run_dir, ck, 1).c_str());
}

int main(int argc, char** argv) try {
  const std::string mode = argc == 4 ? argv[1] : "";
  if (mode == "to-hf")
    to_hf(argv[2], argv[3]);
  else if (mode == "from-hf")
    from_hf(argv[2], argv[3]);
  else {
    std::fprintf(stderr,
                 "usage: export_hf to-hf CHECKPOINT_OR_RUN_DIR OUT_DIR\n"
                 "       export_hf from-hf HF_DIR RUN_DIR\n");
    return 2;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
