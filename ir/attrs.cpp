#include "ir/attrs.h"

#include <fmt/format.h>

#include <algorithm>

#include "ir/error.h"
#include "ir/graph.h"
#include "ir/text.h"

namespace keel {

Attrs::Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) {
  for (const auto& [k, v] : items) set(k, v);
}

void Attrs::set(std::string key, AttrValue value) {
  auto it = std::lower_bound(items_.begin(), items_.end(), key,
                             [](const auto& item, const std::string& k) { return item.first < k; });
  if (it != items_.end() && it->first == key) {
    it->second = std::move(value);
  } else {
    items_.insert(it, {std::move(key), std::move(value)});
  }
}

const AttrValue* Attrs::find(std::string_view key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Attrs::has(std::string_view key) const {
  return find(key) != nullptr;
}

template <class T>
static const T& get(const Attrs& a, std::string_view key, const char* type) {
  const AttrValue* v = a.find(key);
  if (!v) throw Error(fmt::format("attribute '{}' is missing", key));
  if (const T* t = std::get_if<T>(v)) return *t;
  throw Error(fmt::format("attribute '{}' must be {}", key, type));
}

int64_t Attrs::i(std::string_view key) const {
  return get<int64_t>(*this, key, "an integer");
}
double Attrs::f(std::string_view key) const {
  return get<double>(*this, key, "a float");
}
const std::string& Attrs::s(std::string_view key) const {
  return get<std::string>(*this, key, "a string");
}
const std::vector<int64_t>& Attrs::ints(std::string_view key) const {
  return get<std::vector<int64_t>>(*this, key, "a list of integers");
}
DType Attrs::dtype(std::string_view key) const {
  return get<DType>(*this, key, "a dtype");
}
const Array& Attrs::array(std::string_view key) const {
  return get<Array>(*this, key, "an array");
}

const Graph& Attrs::graph(std::string_view key) const {
  const GraphRef& g = get<GraphRef>(*this, key, "a graph");
  if (!g) throw Error(fmt::format("attribute '{}' is an empty graph", key));
  return *g;
}

bool attr_equal(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, Array>) {
          return x.same_bytes(y);
        } else if constexpr (std::is_same_v<T, GraphRef>) {
          if (x == y) return true;
          if (!x || !y) return false;
          return print_graph_body(*x, false) == print_graph_body(*y, false);
        } else if constexpr (std::is_same_v<T, double>) {
          return x == y || (x != x && y != y);  // NaN equals NaN here: same constant
        } else {
          return x == y;
        }
      },
      a);
}

bool Attrs::operator==(const Attrs& o) const {
  if (items_.size() != o.items_.size()) return false;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (items_[i].first != o.items_[i].first) return false;
    if (!attr_equal(items_[i].second, o.items_[i].second)) return false;
  }
  return true;
}

}  // namespace keel
