#include "nn/engram.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "ir/error.h"
#include "nn/block.h"
#include "nn/layers.h"
#include "nn/tensor_parallel.h"

namespace keel::nn {
namespace {

// The hash works modulo the prime 2^31 - 1: every product of two residues (or of a residue and
// vocab + 1 < 2^31) stays below 2^62, so i64 never wraps on any backend.
constexpr int64_t kPrime = 2147483647;
// One multiplier per table (primes in [2^29, 2^31)): different hash heads collide on
// different n-grams.
constexpr std::array<int64_t, 32> kMultipliers = {
    1133218921, 768028243,  912379849,  777441859,  1503923689, 1555616401, 1796205791, 651893171,
    1079672857, 1533960671, 702963733,  1733842567, 2013925183, 1763258597, 1723627777, 1414616531,
    1564111903, 1741938049, 1673492321, 1171478509, 1571521249, 1359229009, 1187725901, 740288183,
    2102927903, 1489898987, 577017871,  664362277,  1909027397, 633725489,  659731769,  751475369};

Tensor i64(double v) {
  return full({}, v, DType::i64);
}

// a mod m for a >= 0 (integer division truncates, so this is exact).
Tensor modulo(const Tensor& a, int64_t m) {
  return a - (a / i64(static_cast<double>(m))) * i64(static_cast<double>(m));
}

}  // namespace

void EngramConfig::validate(const std::string& source) const {
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format("[nn] {}: field 'engram': {}", source, what));
  };
  if (orders.empty()) throw bad("'orders' must list at least one n-gram order, e.g. [2, 3]");
  for (size_t i = 0; i < orders.size(); ++i) {
    if (orders[i] < 2 || orders[i] > 4 || (i > 0 && orders[i] <= orders[i - 1])) {
      throw bad(
          fmt::format("'orders' must be ascending, each in 2..4, got {} at {}", orders[i], i));
    }
  }
  if (heads < 1 || tables() > static_cast<int64_t>(kMultipliers.size())) {
    throw bad(fmt::format("'heads' must be >= 1 with orders x heads <= {} tables, got {} x {}",
                          kMultipliers.size(), orders.size(), heads));
  }
  if (rows < 1 || rows > kPrime) {
    throw bad(fmt::format("'rows' must be in 1..{}, got {}", kPrime, rows));
  }
  if (dim < 1) throw bad(fmt::format("'dim' must be >= 1, got {}", dim));
}

std::vector<std::pair<std::string, Shape>> engram_param_shapes(const EngramConfig& c,
                                                               const std::string& prefix,
                                                               int64_t width) {
  const int64_t G = c.tables();
  return {{under(prefix, "table"), {G * c.rows, c.dim}},
          {under(prefix, "key.weight"), {G * c.dim, width}},
          {under(prefix, "value.weight"), {G * c.dim, width}},
          {under(prefix, "ln_q.weight"), {width}},
          {under(prefix, "ln_k.weight"), {width}}};
}

int64_t engram_row(const EngramConfig& c, int64_t vocab, int64_t g,
                   const std::vector<int64_t>& last) {
  int64_t h = 0;
  for (int64_t token : last) h = (h * (vocab + 1) + token) % kPrime;
  const int64_t mixed = (h * kMultipliers[static_cast<size_t>(g)] + g + 1) % kPrime;
  return g * c.rows + mixed % c.rows;
}

Tensor engram_rows(const EngramConfig& c, int64_t vocab, const Tensor& tokens,
                   const Tensor& positions) {
  const int64_t B = tokens.shape()[0], T = tokens.shape()[1];
  std::vector<Tensor> back;  // back[j]: the token j places earlier
  for (int64_t j = 0; j < c.orders.back(); ++j)
    back.push_back(earlier_in_document(tokens, positions, j, static_cast<double>(vocab)));
  std::vector<Tensor> rows;
  for (size_t o = 0; o < c.orders.size(); ++o) {
    Tensor h = full({B, T}, 0.0, DType::i64);
    for (int64_t j = c.orders[o] - 1; j >= 0; --j) {  // the oldest token first, as engram_row
      h = modulo(h * i64(static_cast<double>(vocab + 1)) + back[static_cast<size_t>(j)], kPrime);
    }
    for (int64_t k = 0; k < c.heads; ++k) {
      const int64_t g = static_cast<int64_t>(o) * c.heads + k;
      Tensor mixed = modulo(h * i64(static_cast<double>(kMultipliers[static_cast<size_t>(g)])) +
                                i64(static_cast<double>(g + 1)),
                            kPrime);
      rows.push_back(
          reshape(modulo(mixed, c.rows) + i64(static_cast<double>(g * c.rows)), {B, T, 1}));
    }
  }
  return rows.size() == 1 ? rows[0] : concat(rows, 2);
}

Tensor engram(const EngramConfig& c, const NamedTensors& p, const std::string& prefix,
              const Tensor& x, const Tensor& rows, int64_t model_processes) {
  return engram_mix(p, prefix, x, engram_read(c, p, prefix, rows, model_processes));
}

Tensor engram_read(const EngramConfig& c, const NamedTensors& p, const std::string& prefix,
                   const Tensor& rows, int64_t model_processes) {
  const Shape& s = rows.shape();
  const Tensor& table = p.at(under(prefix, "table"));
  if (model_processes == 1) {
    return reshape(take(table, rows), {s[0], s[1], c.tables() * c.dim});
  }
  return reshape(read_split_rows(table, rows), {s[0], s[1], c.tables() * c.dim});
}

Tensor engram_mix(const NamedTensors& p, const std::string& prefix, const Tensor& x,
                  const Tensor& e) {
  const int64_t C = x.shape()[2];
  Tensor key =
      rms_norm(matmul(e, p.at(under(prefix, "key.weight"))), p.at(under(prefix, "ln_k.weight")));
  Tensor query = rms_norm(x, p.at(under(prefix, "ln_q.weight")));
  Tensor gate = sigmoid(sum(query * key, {2}, true) * (1.0 / std::sqrt(static_cast<double>(C))));
  return x + gate * matmul(e, p.at(under(prefix, "value.weight")));
}

}  // namespace keel::nn
