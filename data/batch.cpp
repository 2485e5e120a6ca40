// The canonical batch: fixed shapes and dtypes, so one traced step fits every batch.
#include "data/batch.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel::data {

std::vector<Array> Batch::fields() const {
  return {tokens, targets, loss_mask, positions, doc_ids, fim_kind};
}

const std::vector<std::string>& Batch::field_names() {
  static const std::vector<std::string> names = {"tokens",    "targets", "loss_mask",
                                                 "positions", "doc_ids", "fim_kind"};
  return names;
}

Batch empty_batch(int64_t micro_batches, int64_t batch, int64_t seq) {
  if (micro_batches < 1 || batch < 1 || seq < 1) {
    throw InputError(fmt::format("[data] empty_batch: shape [{}, {}, {}] needs every size >= 1",
                                 micro_batches, batch, seq));
  }
  Shape shape{micro_batches, batch, seq};
  return {Array(DType::i64, shape), Array(DType::i64, shape), Array(DType::f32, shape),
          Array(DType::i64, shape), Array(DType::i64, shape), Array(DType::i64, shape)};
}

}  // namespace keel::data
