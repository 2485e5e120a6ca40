// The loader: documents in a seeded order per epoch, packed into non-overlapping rows of T+1
// tokens, so consecutive batches read the concatenated streams exactly once.
#include "data/loader.h"

#include <fmt/format.h>

#include "data/stream.h"
#include "ir/error.h"

namespace keel::data {
namespace {

void check_rate(const char* name, double rate) {
  if (!(rate >= 0.0 && rate <= 1.0)) {  // also refuses NaN
    throw InputError(fmt::format("[data] loader: {} {} is outside [0, 1]", name, rate));
  }
}

void check_size(const char* name, int64_t value) {
  if (value < 1) {
    throw InputError(fmt::format("[data] loader: {} must be >= 1, got {}", name, value));
  }
}

}  // namespace

Loader::Loader(const std::vector<Document>& documents, LoaderConfig config, Cursor cursor)
    : docs_(documents), config_(config), cursor_(cursor) {
  if (docs_.empty()) throw InputError("[data] loader: no documents to load");
  check_size("micro_batches", config_.micro_batches);
  check_size("batch", config_.batch);
  check_size("seq", config_.seq);
  check_rate("fim_rate", config_.fim_rate);
  check_rate("fim_spm_rate", config_.fim_spm_rate);
  const auto n = static_cast<int64_t>(docs_.size());
  if (cursor_.epoch < 0 || cursor_.document < 0 || cursor_.document >= n || cursor_.offset < 0) {
    throw InputError(fmt::format(
        "[data] loader: cursor (epoch {}, document {}, offset {}) is outside a corpus of {} "
        "documents",
        cursor_.epoch, cursor_.document, cursor_.offset, n));
  }
  const auto length =
      static_cast<int64_t>(document_tokens(cursor_.epoch, cursor_.document, nullptr).size());
  if (cursor_.offset >= length) {
    throw InputError(fmt::format(
        "[data] loader: cursor offset {} is past the end of document {} of epoch {} ({} tokens); "
        "was the checkpoint made with another corpus or seed?",
        cursor_.offset, cursor_.document, cursor_.epoch, length));
  }
}

void Loader::load_order(int64_t epoch) {
  if (epoch == order_epoch_) return;
  order_ = epoch_order(static_cast<int64_t>(docs_.size()), config_.seed, epoch, config_.shuffle);
  order_epoch_ = epoch;
}

int64_t Loader::document_at(int64_t epoch, int64_t index) const {
  const auto n = static_cast<int64_t>(docs_.size());
  if (index < 0 || index >= n || epoch < 0) {
    throw Error(fmt::format("[data] loader: document {} of epoch {} is outside 0..{}", index, epoch,
                            n - 1));
  }
  if (epoch == order_epoch_) return order_[static_cast<size_t>(index)];
  return epoch_order(n, config_.seed, epoch, config_.shuffle)[static_cast<size_t>(index)];
}

std::vector<int64_t> Loader::document_tokens(int64_t epoch, int64_t index,
                                             int64_t* fim_kind) const {
  const Document& doc = docs_[static_cast<size_t>(document_at(epoch, index))];
  return token_stream(doc.bytes, {config_.fim_rate, config_.fim_spm_rate}, config_.seed, epoch,
                      index, fim_kind);
}

Batch Loader::next() {
  const int64_t rows = config_.micro_batches * config_.batch, seq = config_.seq;
  const auto total = static_cast<size_t>(rows * seq);
  std::vector<int64_t> tokens(total), targets(total), positions(total), doc_ids(total),
      fim_kind(total);
  std::vector<float> loss_mask(total);

  load_order(cursor_.epoch);
  int64_t kind = 0;
  std::vector<int64_t> stream = document_tokens(cursor_.epoch, cursor_.document, &kind);
  // Takes the cursor's token and moves past it; the cursor never rests at a stream's end.
  auto take = [&]() {
    int64_t token = stream[static_cast<size_t>(cursor_.offset++)];
    if (cursor_.offset == static_cast<int64_t>(stream.size())) {
      cursor_.offset = 0;
      if (++cursor_.document == static_cast<int64_t>(docs_.size())) {
        cursor_.document = 0;
        load_order(++cursor_.epoch);
      }
      stream = document_tokens(cursor_.epoch, cursor_.document, &kind);
    }
    return token;
  };

  for (int64_t r = 0; r < rows; ++r) {
    const auto base = static_cast<size_t>(r * seq);
    int64_t segment = 0, position = 0;
    for (int64_t t = 0; t < seq; ++t) {
      const size_t i = base + static_cast<size_t>(t);
      if (t > 0 && tokens[i - 1] == kEndOfDocument) {
        ++segment;
        position = 0;
      }
      fim_kind[i] = kind;  // read before take(): the kind of the document this token is from
      tokens[i] = take();
      if (t > 0) targets[i - 1] = tokens[i];
      positions[i] = position++;
      doc_ids[i] = segment;
      loss_mask[i] = tokens[i] == kEndOfDocument ? 0.0f : 1.0f;
    }
    targets[base + static_cast<size_t>(seq - 1)] = take();
  }

  Shape shape{config_.micro_batches, config_.batch, seq};
  return {Array::from_i64(shape, tokens),    Array::from_i64(shape, targets),
          Array::from_f32(shape, loss_mask), Array::from_i64(shape, positions),
          Array::from_i64(shape, doc_ids),   Array::from_i64(shape, fim_kind)};
}

}  // namespace keel::data
