#pragma once
// Typed node attributes, kept sorted by key so printing and hashing are canonical.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ir/array.h"
#include "ir/dtype.h"

namespace keel {

class Graph;
// A subgraph attribute (scan's body); shared because graphs are copied often and bodies never
// change once built. Equality and hashing compare its location-free text.
using GraphRef = std::shared_ptr<const Graph>;

using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, DType, Array, GraphRef>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items);

  void set(std::string key, AttrValue value);
  bool has(std::string_view key) const;
  const AttrValue* find(std::string_view key) const;

  // Typed getters throw keel::Error naming the key when it is missing or of another type.
  int64_t i(std::string_view key) const;
  double f(std::string_view key) const;
  const std::string& s(std::string_view key) const;
  const std::vector<int64_t>& ints(std::string_view key) const;
  DType dtype(std::string_view key) const;
  const Array& array(std::string_view key) const;
  const Graph& graph(std::string_view key) const;

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool operator==(const Attrs& other) const;

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

bool attr_equal(const AttrValue& a, const AttrValue& b);

}  // namespace keel
