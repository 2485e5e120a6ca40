// GptConfig as JSON (for --config files, trainer.json and run records) and its validation.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ir/error.h"
#include "nn/gpt.h"

namespace keel::nn {

std::string GptConfig::to_json() const {
  nlohmann::ordered_json j = {
      {"name", name},   {"vocab", vocab},         {"layers", layers}, {"width", width},
      {"heads", heads}, {"kv_heads", kv()},       {"seq", seq},       {"batch", batch},
      {"norm", norm},   {"positions", positions}, {"mlp", mlp},       {"mlp_hidden", hidden()},
      {"bias", bias}};
  return j.dump();
}

GptConfig GptConfig::from_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw InputError(fmt::format("[nn] {}: not JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("[nn] {}: expected a JSON object", source));
  // A config starts from its named preset (or gpt2-s), then takes the fields it gives.
  GptConfig c = gpt_preset(j.value("name", std::string("gpt2-s")));
  for (const auto& item : j.items()) {
    const std::string key = item.key();
    const nlohmann::json& v = item.value();
    auto integer = [&](int64_t& out) {
      if (!v.is_number_integer()) {
        throw InputError(fmt::format("[nn] {}: field '{}' must be an integer", source, key));
      }
      out = v.get<int64_t>();
    };
    auto text_field = [&](std::string& out) {
      if (!v.is_string()) {
        throw InputError(fmt::format("[nn] {}: field '{}' must be a string", source, key));
      }
      out = v.get<std::string>();
    };
    if (key == "name")
      text_field(c.name);
    else if (key == "vocab")
      integer(c.vocab);
    else if (key == "layers")
      integer(c.layers);
    else if (key == "width")
      integer(c.width);
    else if (key == "heads")
      integer(c.heads);
    else if (key == "kv_heads")
      integer(c.kv_heads);
    else if (key == "seq")
      integer(c.seq);
    else if (key == "batch")
      integer(c.batch);
    else if (key == "norm")
      text_field(c.norm);
    else if (key == "positions")
      text_field(c.positions);
    else if (key == "mlp")
      text_field(c.mlp);
    else if (key == "mlp_hidden")
      integer(c.mlp_hidden);
    else if (key == "bias") {
      if (!v.is_boolean()) {
        throw InputError(fmt::format("[nn] {}: field 'bias' must be a boolean", source));
      }
      c.bias = v.get<bool>();
    } else {
      throw InputError(fmt::format(
          "[nn] {}: unknown field '{}'; fields: name, vocab, layers, width, heads, kv_heads, "
          "seq, batch, norm, positions, mlp, mlp_hidden, bias",
          source, key));
    }
  }
  c.validate(source);
  return c;
}

void GptConfig::validate(const std::string& source) const {
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format("[nn] {}: {}", source, what));
  };
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
  if (hidden() < 1) throw bad("mlp_hidden must be >= 1");
}

}  // namespace keel::nn
