#include "train/sampler.h"

#include <cmath>
#include <vector>

#include "data/batch.h"
#include "ir/rng.h"
#include "train/step.h"

namespace keel::train {

std::string sample_text(const nn::GptConfig& config, const nn::Params& params,
                        const std::string& prompt, int64_t bytes, uint64_t seed,
                        double temperature) {
  if (bytes <= 0) return "";
  SampleFn next_logits = make_sample_step(config);
  const int64_t T = config.seq;
  std::vector<int64_t> context;
  for (unsigned char ch : prompt) context.push_back(ch);
  std::string out;
  for (int64_t i = 0; i < bytes; ++i) {
    // The newest T-1 tokens; positions after `index` cannot influence it (causal attention).
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(context.size()) - (T - 1));
    Array tokens(DType::i64, {1, T});
    int64_t n = 0;
    for (size_t j = static_cast<size_t>(start); j < context.size(); ++j)
      tokens.set_i64(n++, context[j]);
    const int64_t index = std::max<int64_t>(n - 1, 0);
    std::vector<float> logits =
        next_logits(params, Tensor(tokens), Tensor(Array::scalar(double(index), DType::i64)))
            .to_f32();
    // Softmax at the temperature, then one seeded uniform draw.
    double top = -INFINITY;
    for (float l : logits) top = std::max(top, double(l));
    std::vector<double> p(logits.size());
    double total = 0;
    for (size_t k = 0; k < logits.size(); ++k) {
      p[k] = std::exp((logits[k] - top) / temperature);
      total += p[k];
    }
    double u = static_cast<double>(rng_uniform01(seed, 0x5a3d1e, static_cast<uint64_t>(i))) * total;
    size_t pick = 0;
    for (; pick + 1 < p.size() && u >= p[pick]; ++pick) u -= p[pick];
    if (static_cast<int64_t>(pick) <= data::kFimMiddle) break;  // end of document, or control
    context.push_back(static_cast<int64_t>(pick));
    out.push_back(static_cast<char>(pick));
  }
  return out;
}

}  // namespace keel::train
