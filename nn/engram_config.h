#pragma once
/// @file
/// What an n-gram memory (Engram-style) is made of; a field of nn::GptConfig. The block is
/// nn/engram.h.
#include <cstdint>
#include <string>
#include <vector>

namespace keel::nn {

/// An n-gram memory: for each order n and each hash head, a table of `rows` rows of `dim`
/// values, indexed by a hash of the position's last n tokens (never reaching back past the
/// start of its document).
struct EngramConfig {
  std::vector<int64_t> orders = {2, 3};  ///< n of each n-gram, ascending, each in 2..4
  int64_t heads = 4;                     ///< hash heads per order, each with its own table
  int64_t rows = 4093;                   ///< rows of each table (a prime spreads the hash)
  int64_t dim = 32;                      ///< values per row
  /// Tables in all: one per order and hash head.
  int64_t tables() const { return static_cast<int64_t>(orders.size()) * heads; }
  /// keel::InputError naming `source` for an out-of-range field.
  void validate(const std::string& source) const;
  bool operator==(const EngramConfig&) const = default;  ///< every field equal
};

}  // namespace keel::nn
