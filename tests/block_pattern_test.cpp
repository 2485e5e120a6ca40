// The model config's block_pattern and the hybrid preset nam-s built on it: the layer lists a
// pattern gives, its JSON round trip, one line naming the field for each bad pattern, and nam-s's
// layers scanned as one repeated body.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config_refusal.h"
#include "ir/error.h"
#include "nn/gpt.h"
#include "nn/layer_stack.h"

namespace keel {
namespace {

std::string refusal(const std::string& json) {
  return testing_support::config_refusal(json);
}

// Each letter is one layer's kind, the pattern repeated to fill the layers.
TEST(BlockPattern, SetsEachLayersKindAndRoundTrips) {
  const nn::GptConfig c = nn::GptConfig::from_json(
      R"({"name": "code-s", "layers": 6, "block_pattern": "ASE", "mamba": {"head_dim": 16},
          "sparse_attention": {"keys": 8}})",
      "m.json");
  EXPECT_EQ(c.sparse_attention_layer_ids, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(c.moe_layer_ids, (std::vector<int64_t>{2, 5}));
  EXPECT_TRUE(c.mamba_layer_ids.empty());
  EXPECT_TRUE(c.engram_layer_ids.empty());
  EXPECT_EQ(nn::layer_kinds(c, 0, 6), "dxmdxm");
  const std::string json = c.to_json();
  EXPECT_NE(json.find("\"block_pattern\":\"ASE\""), std::string::npos) << json;
  EXPECT_EQ(json.find("moe_layers"), std::string::npos) << json;
  EXPECT_EQ(nn::GptConfig::from_json(json, "again").to_json(), json);
  // Lists a config gives replace its preset's pattern.
  const nn::GptConfig lists =
      nn::GptConfig::from_json(R"({"name": "nam-s", "mamba_layers": [2]})", "m.json");
  EXPECT_TRUE(lists.block_pattern.empty());
  EXPECT_EQ(lists.mamba_layer_ids, (std::vector<int64_t>{2}));
  EXPECT_TRUE(lists.moe_layer_ids.empty());
  // ... and come back from its JSON, even empty ones, not as the preset's pattern again.
  const nn::GptConfig none =
      nn::GptConfig::from_json(R"({"name": "nam-s", "moe_layers": []})", "m.json");
  EXPECT_EQ(nn::layer_kinds(none, 0, 8), "dddddddd");
  EXPECT_EQ(nn::GptConfig::from_json(none.to_json(), "again").to_json(), none.to_json());
  EXPECT_EQ(nn::layer_kinds(nn::GptConfig::from_json(none.to_json(), "again"), 0, 8), "dddddddd");
  EXPECT_EQ(nn::GptConfig::from_json(lists.to_json(), "again").mamba_layer_ids,
            (std::vector<int64_t>{2}));
  // A preset's pattern follows the config's layer count.
  const nn::GptConfig deeper =
      nn::GptConfig::from_json(R"({"name": "nam-s", "layers": 12})", "m.json");
  EXPECT_EQ(deeper.mamba_layer_ids, (std::vector<int64_t>{2, 6, 10}));
}

TEST(BlockPattern, RefusesBadPatternsByName) {
  EXPECT_EQ(refusal(R"({"layers": 6, "block_pattern": "AEME"})"),
            "[nn] m.json: field 'block_pattern': \"AEME\" has 4 letters, which must divide layers "
            "(6); give layers a multiple of 4, or another block_pattern or the layer lists");
  EXPECT_EQ(refusal(R"({"name": "nam-s", "layers": 6})"),
            "[nn] m.json: field 'block_pattern': \"SEMN\" has 4 letters, which must divide layers "
            "(6); give layers a multiple of 4, or another block_pattern or the layer lists");
  EXPECT_EQ(refusal(R"({"layers": 4, "block_pattern": "AXME"})"),
            "[nn] m.json: field 'block_pattern': 'X' at 1 is not a block: A attention, S sparse "
            "attention, E experts, M Mamba-2, N n-gram memory");
  EXPECT_EQ(refusal(R"({"layers": 4, "block_pattern": ""})"),
            "[nn] m.json: field 'block_pattern': it is empty; give one letter per layer, e.g. "
            "\"SEMN\"");
  EXPECT_EQ(refusal(R"({"layers": 4, "block_pattern": "AE", "moe_layers": [1]})"),
            "[nn] m.json: field 'block_pattern' sets every layer's kind; give it or the layer "
            "lists (moe_every, moe_layers, sparse_attention_layers, mamba_layers, "
            "engram_layers), not both");
  EXPECT_EQ(refusal(R"({"block_pattern": 4})"),
            "[nn] m.json: field 'block_pattern' must be a string");
  // A config changed after its pattern was applied is refused, not silently out of step.
  nn::GptConfig c = nn::gpt_preset("nam-s");
  c.mamba_layer_ids = {2};
  EXPECT_EQ(testing_support::validate_refusal(c),
            "[nn] m.json: field 'block_pattern' \"SEMN\" and the layer lists disagree; set the "
            "lists with apply_block_pattern, or clear the pattern");
}

// nam-s: code-s's width and attention (GQA, fused QKV), "SEMN" twice, experts with a shared
// one, one MTP head; scanned, one 4-layer body looped twice.
TEST(BlockPattern, NamSIsTheSeedsHybridAtCodeSWidth) {
  const nn::GptConfig c = nn::gpt_preset("nam-s");
  const nn::GptConfig code = nn::gpt_preset("code-s");
  EXPECT_EQ(c.width, code.width);
  EXPECT_EQ(c.kv(), code.kv());
  EXPECT_EQ(c.layers, 8);
  EXPECT_EQ(c.block_pattern, "SEMN");
  EXPECT_TRUE(c.moe.shared_expert);
  EXPECT_EQ(c.mtp_depth(), 1);
  EXPECT_EQ(nn::layer_kinds(c, 0, 8), "xmsDxmsD");
  nn::GptConfig scanned = c;
  scanned.layout.scanned = true;
  EXPECT_EQ(nn::layer_plan(scanned, 0, 8).why,
            "scan: layers 0..7 as 2 iterations of one 4-layer body [sparse attention + dense, "
            "MoE, Mamba + dense, n-gram memory + dense]");
  EXPECT_EQ(nn::GptConfig::from_json(c.to_json(), "again").to_json(), c.to_json());
}

}  // namespace
}  // namespace keel
