#pragma once
// The smallest code-s model the tests split and stack: 2 layers of width 16, 4 query heads over
// 2 kv heads, SwiGLU 24 wide, a vocabulary of 32.
#include "nn/gpt.h"

namespace keel::testing_support {

inline nn::GptConfig tiny_code() {
  nn::GptConfig c = nn::gpt_preset("code-s");
  c.name = "tiny-code";
  c.vocab = 32;
  c.layers = 2;
  c.width = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_hidden = 24;
  c.seq = 8;
  c.batch = 2;
  return c;
}

}  // namespace keel::testing_support
