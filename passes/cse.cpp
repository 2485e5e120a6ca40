// cse: one node per distinct computation. Every op is a pure function of its inputs and
// attributes (rng_uniform included: seed and counter are inputs), so equal nodes are merged.
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <unordered_map>
#include <variant>

#include "ir/hash.h"
#include "ir/text.h"
#include "passes/pipeline.h"
#include "passes/rebuild.h"

namespace keel::passes {
namespace {

// A bucket key: equal nodes always get equal keys; the exact test is same_node below.
std::string bucket_key(const Node& n, const std::vector<NodeId>& inputs) {
  std::string key = fmt::format("{}:{}(", op_name(n.op), n.type.str());
  for (NodeId in : inputs) key += fmt::format("{},", in);
  key += ')';
  for (const auto& [name, value] : n.attrs.items()) {
    key += name + '=';
    if (const Array* a = std::get_if<Array>(&value)) {
      key += fmt::format("{}{}#{}", dtype_name(a->dtype()), shape_str(a->shape()),
                         hash_bytes({reinterpret_cast<const char*>(a->data()), a->nbytes()}).hex());
    } else if (const double* d = std::get_if<double>(&value); d && std::isnan(*d)) {
      key += "nan";  // attr_equal treats every NaN as equal
    } else {
      key += attr_value_str(value);
    }
    key += ';';
  }
  return key;
}

bool same_node(const Node& a, const Node& b, const std::vector<NodeId>& b_inputs) {
  return a.op == b.op && a.type == b.type && a.inputs == b_inputs && a.attrs == b.attrs;
}

}  // namespace

Graph cse(const Graph& g) {
  Rebuilder rb(g);
  std::unordered_map<std::string, std::vector<NodeId>> buckets;  // key -> new ids
  for (size_t i = 0; i < g.size(); ++i) {
    const NodeId id = static_cast<NodeId>(i);
    const Node& n = g.node(id);
    if (n.op == Op::parameter) {  // two inputs are never the same value
      rb.copy(id);
      continue;
    }
    std::vector<NodeId> inputs = rb.mapped_inputs(id);
    std::vector<NodeId>& bucket = buckets[bucket_key(n, inputs)];
    NodeId found = -1;
    for (NodeId c : bucket) {
      if (same_node(rb.dst().node(c), n, inputs)) {
        found = c;
        break;
      }
    }
    if (found >= 0) {
      rb.map_to(id, found);
    } else {
      bucket.push_back(rb.copy(id));
    }
  }
  return rb.finish();
}

}  // namespace keel::passes
