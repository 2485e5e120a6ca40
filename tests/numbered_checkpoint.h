#pragma once
// A checkpoint of a GPT whose every element of every tensor differs from the others, held in
// memory: for tests that place, split and gather training state and compare bits.
#include <nlohmann/json.hpp>

#include "nn/gpt.h"
#include "train/checkpoint.h"

namespace keel::testing_support {

inline train::CheckpointData numbered_checkpoint(const nn::GptConfig& c) {
  train::CheckpointData d;
  d.step = 1;
  float next = 0;
  auto numbered = [&next](const Shape& shape) {
    Array a(DType::f32, shape);
    auto* f = reinterpret_cast<float*>(a.data());
    for (int64_t i = 0; i < a.numel(); ++i) f[i] = next++ * 1e-6f;
    return a;
  };
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) {
    d.model[name] = numbered(shape);
    d.optimizer[name + ".exp_avg"] = numbered(shape);
    d.optimizer[name + ".exp_avg_sq"] = numbered(shape);
  }
  d.trainer = nlohmann::json{{"step", 1}}.dump();
  return d;
}

}  // namespace keel::testing_support
