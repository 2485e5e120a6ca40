#pragma once
/// @file
/// Typed node attributes, kept sorted by key so printing and hashing are canonical.
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
/// A subgraph attribute (scan's body); shared because graphs are copied often and bodies never
/// change once built. Equality and hashing compare its location-free text.
using GraphRef = std::shared_ptr<const Graph>;

/// One attribute's value: an integer, a float, a string, an integer list, a dtype, an array
/// (a constant's payload) or a subgraph.
using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, DType, Array, GraphRef>;

/// A node's attributes: values by key, kept sorted by key.
class Attrs {
 public:
  Attrs() = default;
  /// The given items, sorted by key.
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items);

  void set(std::string key, AttrValue value);  ///< adds `key`, or replaces its value
  bool has(std::string_view key) const;        ///< whether `key` is set
  /// The value of `key`; null when it is not set.
  const AttrValue* find(std::string_view key) const;

  /// @name Typed getters
  /// Typed getters throw keel::Error naming the key when it is missing or of another type.
  ///@{
  int64_t i(std::string_view key) const;                         ///< an integer attribute
  double f(std::string_view key) const;                          ///< a float attribute
  const std::string& s(std::string_view key) const;              ///< a string attribute
  const std::vector<int64_t>& ints(std::string_view key) const;  ///< an integer-list attribute
  DType dtype(std::string_view key) const;                       ///< a dtype attribute
  const Array& array(std::string_view key) const;                ///< an array attribute
  const Graph& graph(std::string_view key) const;                ///< a subgraph attribute
  ///@}

  /// Every attribute, sorted by key.
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool operator==(const Attrs& other) const;  ///< same keys with equal values (attr_equal)

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

/// Equal type and value; arrays compare dtype, shape and bytes, subgraphs their location-free
/// text, and a NaN float equals a NaN.
bool attr_equal(const AttrValue& a, const AttrValue& b);

}  // namespace keel
