// cse: one node per distinct computation. Every op is a pure function of its inputs and
// attributes (rng_uniform included: seed and counter are inputs), so equal nodes are merged.
// An attention_lse that shares q, k, doc ids and scale with an earlier attention moves to just
// before it, where a target may run both in one call (Target::shares_call).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>

#include "ir/attention.h"
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

// q, k, doc ids (or -1), scale and layout: what an attention and its attention_lse share.
using AttentionKey = std::tuple<NodeId, NodeId, NodeId, double, AttentionLayout>;
AttentionKey attention_key(const Node& n) {
  const bool lse = n.op == Op::attention_lse;
  const size_t with_doc = lse ? 3 : 4;
  const NodeId doc = n.inputs.size() == with_doc ? n.inputs.back() : -1;
  return {n.inputs[0], n.inputs[1], doc, n.attrs.f("scale"), attention_layout(n.attrs)};
}

Graph place_lse_before_attention(const Graph& g) {
  std::map<AttentionKey, NodeId> lse;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g.nodes()[i].op == Op::attention_lse) {
      lse.emplace(attention_key(g.nodes()[i]), static_cast<NodeId>(i));
    }
  }
  std::vector<NodeId> before(g.size(), -1);  // per attention: the lse to emit just before it
  std::vector<char> moved(g.size(), 0);
  for (size_t i = 0; i < g.size() && !lse.empty(); ++i) {
    if (g.nodes()[i].op != Op::attention) continue;
    auto it = lse.find(attention_key(g.nodes()[i]));
    if (it == lse.end() || it->second < static_cast<NodeId>(i) || moved[it->second]) continue;
    before[i] = it->second;
    moved[it->second] = 1;
  }
  if (std::none_of(moved.begin(), moved.end(), [](char m) { return m != 0; })) return g;
  Rebuilder rb(g);
  for (size_t i = 0; i < g.size(); ++i) {
    if (moved[i]) continue;
    if (before[i] >= 0) rb.copy(before[i]);
    rb.copy(static_cast<NodeId>(i));
  }
  return rb.finish();
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
  return place_lse_before_attention(rb.finish());
}

}  // namespace keel::passes
