#pragma once
// Text generation from a trained model through one compiled program (logits of the next byte
// for a fixed [1, T] context), sampling on the host with a seeded generator.
#include <cstdint>
#include <string>

#include "nn/gpt.h"

namespace keel::train {

// Up to `bytes` bytes continuing `prompt` (stops early at an end-of-document token), with
// temperature sampling seeded by `seed`. Control tokens never appear in the result.
std::string sample_text(const nn::GptConfig& config, const nn::Params& params,
                        const std::string& prompt, int64_t bytes, uint64_t seed,
                        double temperature = 0.8);

}  // namespace keel::train
