// Overflow-safe element counts of a GPT config: every product that builds a parameter or a
// large activation shape, computed with checked arithmetic before anything uses it.
#include "nn/gpt_sizes.h"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "ir/error.h"

namespace keel::nn {
namespace {

// At most this many elements, so a tensor's bytes (8 per element at most) fit int64 too.
constexpr int64_t kMaxElements = INT64_MAX / 8;

struct Factor {
  std::string name;  // "'width'", or a derived quantity such as "'width' / 'heads'"
  int64_t value;
};

class Counter {
 public:
  explicit Counter(const std::string& source) : source_(source) {}

  // The product of `factors`, the element count of `what`.
  int64_t product(const std::vector<Factor>& factors, const std::string& what) const {
    int64_t n = 1;
    for (const Factor& f : factors) {
      if (__builtin_mul_overflow(n, f.value, &n) || n > kMaxElements) too_large(factors, what);
    }
    return n;
  }
  // a + b, both already counts of `what`'s parts.
  int64_t sum(int64_t a, int64_t b, const std::string& what) const {
    int64_t n = 0;
    if (__builtin_add_overflow(a, b, &n) || n > kMaxElements) {
      throw InputError(
          fmt::format("[nn] {}: {} would count more than 2^60 elements (bytes must "
                      "fit int64); use a smaller width, vocab or layer count",
                      source_, what));
    }
    return n;
  }

 private:
  [[noreturn]] void too_large(const std::vector<Factor>& factors, const std::string& what) const {
    std::string list;
    for (const Factor& f : factors) {
      if (f.name.empty()) continue;  // constants such as the 2 of a fused gate and up
      list += fmt::format("{}{} ({})", list.empty() ? "" : " x ", f.name, f.value);
    }
    throw InputError(
        fmt::format("[nn] {}: {}{} would hold more than 2^60 elements (bytes "
                    "must fit int64); use smaller values",
                    source_, list.empty() ? "" : "fields " + list + ": ", what));
  }
  std::string source_;
};

}  // namespace

void check_gpt_sizes(const GptConfig& c, const std::string& source) {
  const Counter n(source);
  const Factor C{"'width'", c.width}, V{"'vocab'", c.vocab}, T{"'seq'", c.seq},
      B{"'batch'", c.batch}, H{"'heads'", c.heads};
  // width x width fits, so heads + 2 kv_heads (at most 3 x width) cannot overflow below.
  const int64_t proj = n.product({C, C}, "attn.c_proj.weight");
  const Factor D{"'width' / 'heads'", c.width / c.heads};
  const Factor QKV{"('heads' + 2 x 'kv_heads')", c.heads + 2 * c.kv()};
  const Factor F{c.mlp_hidden > 0 ? "'mlp_hidden'" : "4 x 'width'",
                 c.mlp_hidden > 0 ? c.mlp_hidden : n.product({{"", 4}, C}, "mlp_hidden")};
  const int64_t norm = n.product({{"", c.norm == "layernorm" ? 2 : 1}, C}, "a norm");

  // One dense block's weights: two norms, fused QKV, the output projection, the MLP (biases are
  // smaller than their weights and left out).
  const int64_t qkv = n.product({C, QKV, D}, "attn.c_attn.weight");
  const int64_t mlp = n.product({{"", c.mlp == "swiglu" ? 3 : 2}, C, F}, "the MLP's weights");
  const int64_t attn = n.sum(n.sum(2 * norm, qkv, "one layer"), proj, "one layer");
  const int64_t dense = n.sum(attn, mlp, "one layer");
  int64_t total = n.sum(n.product({V, C}, "wte.weight"), norm, "the parameters");
  if (c.positions == "learned") total = n.sum(total, n.product({T, C}, "wpe.weight"), "wpe");
  total = n.sum(total,
                n.product({{"'layers'", c.layers - c.moe_layers()}, {"", dense}},
                          "the dense layers' parameters"),
                "the parameters");
  if (c.moe_layers() > 0) {
    const Factor E{"'moe.experts'", c.moe.experts};
    const Factor Fm = c.moe.hidden > 0 ? Factor{"'moe.hidden'", c.moe.hidden} : F;
    const int64_t experts = n.product({{"", 3}, E, C, Fm}, "the experts' weights");
    const int64_t shared = c.moe.shared_expert ? n.product({{"", 3}, C, Fm}, "moe.shared") : 0;
    const int64_t moe =
        n.sum(n.sum(attn, experts, "one MoE layer"),
              n.sum(shared, n.product({C, E}, "moe.router"), "one MoE layer"), "one MoE layer");
    total = n.sum(total, n.product({{"'moe_layers'", c.moe_layers()}, {"", moe}}, "MoE layers"),
                  "the parameters");
    // Dispatch gives each expert slots for at most every token, by the expert's hidden width.
    n.product({E, B, T, {"", 2}, Fm}, "the experts' activations");
    n.product({B, T, {"'moe.top_k'", c.moe.top_k}}, "the routing choices");
  }
  if (!c.engram_layer_ids.empty()) {
    const Factor G{"'engram.orders' x 'engram.heads'", c.engram.tables()};
    const Factor R{"'engram.rows'", c.engram.rows}, E{"'engram.dim'", c.engram.dim};
    const int64_t memory =
        n.sum(n.product({G, R, E}, "engram.table"),
              n.product({{"", 2}, G, E, C}, "engram's key and value weights"), "one n-gram memory");
    const auto layers = static_cast<int64_t>(c.engram_layer_ids.size());
    total = n.sum(total, n.product({{"'engram_layers'", layers}, {"", memory}}, "n-gram memories"),
                  "the parameters");
    n.product({B, T, G, E}, "the n-gram memory's read");
  }
  if (!c.mamba_layer_ids.empty()) {
    const Factor S{"'mamba.state'", c.mamba.state}, Q{"'mamba.chunk'", c.mamba.chunk};
    const int64_t inner = n.product({{"'mamba.expand'", c.mamba.expand}, C}, "Mamba's channels");
    const int64_t xbc = n.sum(inner, n.product({{"", 2}, S}, "Mamba's B and C"), "mamba.conv");
    const Factor I{"Mamba's channels", inner}, Xbc{"Mamba's convolved channels", xbc};
    const Factor Hm{"Mamba's heads", inner / c.mamba.head_dim};
    const int64_t columns = n.sum(n.sum(inner, xbc, "mamba.in_proj"), Hm.value, "mamba.in_proj");
    const int64_t mixer =
        n.sum(n.sum(n.product({C, {"mamba.in_proj's columns", columns}}, "mamba.in_proj.weight"),
                    n.product({{"'mamba.conv'", c.mamba.conv}, Xbc}, "mamba.conv.weight"),
                    "one Mamba layer"),
              n.product({I, C}, "mamba.out_proj.weight"), "one Mamba layer");
    const auto layers = static_cast<int64_t>(c.mamba_layer_ids.size());
    total = n.sum(total, n.product({{"'mamba_layers'", layers}, {"", mixer}}, "Mamba layers"),
                  "the parameters");
    n.product({B, Hm, Q, Q}, "Mamba's decays within a chunk");
    n.product({B, I, S}, "Mamba's state");
  }
  if (!c.sparse_attention_layer_ids.empty()) {
    const SparseAttentionConfig& s = c.sparse_attention;
    const Factor Hi{"'sparse_attention.indexer_heads'", s.indexer_heads};
    const Factor Di{"'sparse_attention.indexer_dim'", s.indexer_dim};
    const int64_t indexer =
        n.sum(n.product({C, Hi, Di}, "attn.indexer.query.weight"),
              n.sum(n.product({C, Di}, "attn.indexer.key.weight"),
                    n.product({C, Hi}, "attn.indexer.weights.weight"), "one indexer"),
              "one indexer");
    const auto layers = static_cast<int64_t>(c.sparse_attention_layer_ids.size());
    total =
        n.sum(total, n.product({{"'sparse_attention_layers'", layers}, {"", indexer}}, "indexers"),
              "the parameters");
    // The indexer scores every query's keys at each of its heads before it sums them.
    n.product({B, T, Hi, T}, "the indexer's scores");
    n.product({B, T, {"'sparse_attention.window' + 'sparse_attention.keys'", s.window + s.keys}},
              "the sparse attention's keys");
  }
  const int64_t mtp = n.sum(dense, n.product({{"", 2}, C, C}, "an MTP projection"), "MTP");
  n.sum(total, n.product({{"", c.mtp_depth()}, {"", mtp}}, "the MTP heads"), "the parameters");

  // The largest activations of a step: logits, attention scores, the MLP's hidden layer.
  n.product({B, T, V}, "the logits");
  n.product({B, H, T, T}, "the attention scores");
  n.product({B, T, {"", 2}, F}, "the MLP activations");
}

}  // namespace keel::nn
