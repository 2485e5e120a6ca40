#pragma once
// A deterministic, seeded loader: documents are visited in a seeded order per epoch, optionally
// turned into fill-in-the-middle examples, packed into rows of seq+1 tokens (a document longer
// than a row continues in the next row as a new segment), and cut into canonical batches. Its
// cursor is a small value that a checkpoint stores; a loader built from a cursor continues
// exactly where the one that produced it stopped.
#include <cstdint>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/corpus.h"

namespace keel::data {

struct LoaderConfig {
  int64_t micro_batches = 1;  // K
  int64_t batch = 8;          // B
  int64_t seq = 256;          // T
  double fim_rate = 0.0;      // fraction of documents turned into FIM examples
  double fim_spm_rate = 0.5;  // of those, the fraction in suffix-prefix-middle order
  uint64_t seed = 0;
  bool shuffle = true;  // false: documents in corpus order (validation)
};

// Where the loader is: which epoch, which document of that epoch's order, which byte of that
// document's token stream. Everything else is derived from (seed, cursor).
struct Cursor {
  int64_t epoch = 0;
  int64_t document = 0;
  int64_t offset = 0;
  std::string to_json() const;
  // keel::InputError naming `source` and the field on malformed JSON.
  static Cursor from_json(const std::string& json, const std::string& source);
  bool operator==(const Cursor&) const = default;
};

class Loader {
 public:
  // `documents` must outlive the loader. keel::InputError when there are none, or when B, T or
  // K is < 1, or a rate is outside [0, 1].
  Loader(const std::vector<Document>& documents, LoaderConfig config, Cursor cursor = {});
  Batch next();
  const Cursor& cursor() const { return cursor_; }
  const LoaderConfig& config() const { return config_; }

  // The token stream of document `index` of `epoch`: its bytes, FIM-rearranged with control
  // tokens when the seeded draw for (epoch, document) says so, then kEndOfDocument. Exposed
  // for tests.
  std::vector<int64_t> document_tokens(int64_t epoch, int64_t index, int64_t* fim_kind) const;
  // Which corpus document is at `index` in `epoch`'s order.
  int64_t document_at(int64_t epoch, int64_t index) const;

 private:
  void load_order(int64_t epoch);

  const std::vector<Document>& docs_;
  LoaderConfig config_;
  Cursor cursor_;
  // The order of cursor_.epoch, so next() does not rebuild a permutation per batch.
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace keel::data
