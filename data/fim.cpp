// Fill-in-the-middle: a seeded share of documents is cut in three and reordered around control
// tokens, so the model also learns to write a middle given both sides.
#include "data/batch.h"
#include "data/stream.h"
#include "ir/rng.h"

namespace keel::data {
namespace {

constexpr uint64_t kFimStream = 0x66696dull;  // "fim": apart from the order draws
constexpr int64_t kMinFimBytes = 3;           // prefix, middle and suffix each get a byte

// Draw `j` for document `index` of `epoch`: a function of (seed, epoch, index) only.
uint64_t draw(uint64_t seed, int64_t epoch, int64_t index, uint64_t j) {
  const uint64_t stream = splitmix64(splitmix64(seed ^ kFimStream) ^ static_cast<uint64_t>(index));
  return rng_bits(stream, static_cast<uint64_t>(epoch), j);
}

double unit(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1) with 53 bits
}

void append(std::vector<int64_t>& out, std::string_view bytes) {
  for (char c : bytes) out.push_back(static_cast<unsigned char>(c));
}

}  // namespace

int64_t fim_kind_of(int64_t n, FimRates rates, uint64_t seed, int64_t epoch, int64_t index) {
  if (n < kMinFimBytes || unit(draw(seed, epoch, index, 0)) >= rates.fim_rate) return 0;
  return unit(draw(seed, epoch, index, 1)) < rates.spm_rate ? 2 : 1;
}

bool fim_varies_length(int64_t n, FimRates rates) {
  return n >= kMinFimBytes && rates.fim_rate > 0.0 && rates.fim_rate < 1.0;
}

int64_t token_stream_length(int64_t n, FimRates rates, uint64_t seed, int64_t epoch,
                            int64_t index) {
  // Three control tokens when FIM, and the end-of-document token always.
  return n + (fim_kind_of(n, rates, seed, epoch, index) != 0 ? 3 : 0) + 1;
}

std::vector<int64_t> token_stream(std::string_view bytes, FimRates rates, uint64_t seed,
                                  int64_t epoch, int64_t index, int64_t* fim_kind) {
  std::vector<int64_t> out;
  out.reserve(bytes.size() + 4);
  const auto n = static_cast<int64_t>(bytes.size());
  const int64_t kind = fim_kind_of(n, rates, seed, epoch, index);
  if (kind != 0) {
    // Two distinct cuts among the n-1 inner boundaries, uniformly: no part is empty.
    auto inner = static_cast<uint64_t>(n - 1);
    auto a = 1 + static_cast<int64_t>(draw(seed, epoch, index, 2) % inner);
    auto b = 1 + static_cast<int64_t>(draw(seed, epoch, index, 3) % (inner - 1));
    if (b >= a) ++b;
    if (a > b) std::swap(a, b);
    std::string_view prefix = bytes.substr(0, static_cast<size_t>(a));
    std::string_view middle = bytes.substr(static_cast<size_t>(a), static_cast<size_t>(b - a));
    std::string_view suffix = bytes.substr(static_cast<size_t>(b));
    out.push_back(kFimPrefix);
    if (kind == 1) {
      append(out, prefix);
      out.push_back(kFimSuffix);
      append(out, suffix);
      out.push_back(kFimMiddle);
      append(out, middle);
    } else {
      out.push_back(kFimSuffix);
      append(out, suffix);
      out.push_back(kFimMiddle);
      append(out, prefix);
      append(out, middle);
    }
  } else {
    append(out, bytes);
  }
  out.push_back(kEndOfDocument);
  if (fim_kind) *fim_kind = kind;
  return out;
}

}  // namespace keel::data
