#pragma once
// A synthetic training batch for step tests: the six fields a GPT step reads, [K, B, T] each.
#include <vector>

#include "trace/tensor.h"

namespace keel::testing_support {

// A [K, B, T] batch of K*B rows: row r of micro-batch k is global row k*B + r.
inline std::vector<Tensor> rows_batch(int64_t K, int64_t B, int64_t T, int64_t vocab) {
  Array tok(DType::i64, {K, B, T}), tgt(DType::i64, {K, B, T}), mask(DType::f32, {K, B, T}),
      pos(DType::i64, {K, B, T}), doc(DType::i64, {K, B, T}), fim(DType::i64, {K, B, T});
  for (int64_t i = 0; i < tok.numel(); ++i) {
    const int64_t t = i % T;
    tok.set_i64(i, (i * 7 + 1) % vocab);
    tgt.set_i64(i, (i * 7 + 8) % vocab);
    mask.set_f64(i, (i % 5 == 0) ? 0.0 : 1.0);  // some dead targets
    doc.set_i64(i, t < 3 ? 0 : 1);
    pos.set_i64(i, t < 3 ? t : t - 3);
  }
  return {Tensor(tok), Tensor(tgt), Tensor(mask), Tensor(pos), Tensor(doc), Tensor(fim)};
}

}  // namespace keel::testing_support
