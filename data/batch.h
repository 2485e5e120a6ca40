#pragma once
// The canonical batch: every field always present with fixed shapes and dtypes, whatever the
// documents looked like, so the training step is one program. Masks decide what is live.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/array.h"

namespace keel::data {

// Byte tokens 0..255. Four byte values never occur in text (load_corpus rejects them), so they
// serve as control tokens.
inline constexpr int64_t kEndOfDocument = 0;  // ends every document
inline constexpr int64_t kFimPrefix = 1;
inline constexpr int64_t kFimSuffix = 2;
inline constexpr int64_t kFimMiddle = 3;
inline constexpr int64_t kVocab = 256;

// Shapes [K, B, T] (K micro-batches of B rows of T tokens):
struct Batch {
  Array tokens;     // i64: input tokens
  Array targets;    // i64: the next token of each position
  Array loss_mask;  // f32: 1 where the target counts (same document, not padding), else 0
  Array positions;  // i64: position within its document segment (restarts at 0 per document)
  Array doc_ids;    // i64: document segment id within the row (0, 1, ...); attention never
                    //      crosses a change of id
  Array fim_kind;   // i64: per position 0 plain, 1 prefix-suffix-middle, 2 suffix-prefix-middle
  // In the order a training step takes them.
  std::vector<Array> fields() const;
  // The fields' names in that order, for messages ("batch leaf 'tokens'").
  static const std::vector<std::string>& field_names();
};

// A batch of zeros (loss_mask 0) of the canonical shapes, for tracing before data arrives.
Batch empty_batch(int64_t micro_batches, int64_t batch, int64_t seq);

}  // namespace keel::data
