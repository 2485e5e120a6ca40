// Type rules of the fused attention ops (ir/attention.h) and of sparse attention's
// (ir/sparse_attention.h).
#include "ir/attention.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>
#include <vector>

#include "ir/error.h"
#include "ir/sparse_attention.h"

namespace keel {
namespace {

constexpr const char* kNames[] = {"q", "k", "v", "out", "dout", "lse"};

void require(bool ok, const std::string& msg) {
  if (!ok) throw Error(msg);
}

void require_f32(const TensorType& t, const char* name) {
  require(t.dtype == DType::f32,
          fmt::format("{} is {}; expected f32 (cast first)", name, dtype_name(t.dtype)));
}

}  // namespace

int attention_fixed_inputs(Op op) {
  switch (op) {
    case Op::attention:
      return 3;
    case Op::attention_lse:
      return 2;
    case Op::attention_dq:
    case Op::attention_dk:
    case Op::attention_dv:
      return 6;
    default:
      throw Error(fmt::format("{} is not an attention op", op_name(op)));
  }
}

AttentionLayout attention_layout(const Attrs& a) {
  if (!a.has("layout")) return AttentionLayout::bhtd;
  const std::string& s = a.s("layout");
  if (s == "bhtd") return AttentionLayout::bhtd;
  if (s == "bthd") return AttentionLayout::bthd;
  throw Error(fmt::format("layout '{}' is not bhtd or bthd", s));
}

AttentionLseArgs attention_lse_args(const Node& attention) {
  AttentionLseArgs a{{attention.inputs[0], attention.inputs[1]},
                     {{"scale", attention.attrs.f("scale")}}};
  if (attention.inputs.size() == 4) a.inputs.push_back(attention.inputs[3]);  // doc ids
  if (const AttrValue* layout = attention.attrs.find("layout")) a.attrs.set("layout", *layout);
  return a;
}

const char* attention_layout_name(AttentionLayout layout) {
  return layout == AttentionLayout::bthd ? "bthd" : "bhtd";
}

Shape swap_heads_and_positions(const Shape& s) {
  Shape out = s;
  if (out.size() == 4) std::swap(out[1], out[2]);
  return out;
}

AttentionDims attention_dims(Op op, std::span<const TensorType> given, AttentionLayout layout) {
  const int fixed = attention_fixed_inputs(op);
  const bool bthd = layout == AttentionLayout::bthd;
  require(given[0].shape.size() == 4,
          fmt::format("q is {}; expected rank 4 [batch, {}]", given[0].str(),
                      bthd ? "seq, heads, head_dim" : "heads, seq, head_dim"));
  // Checked in bhtd order; lse (input 5) and the doc ids are the same in both layouts. Messages
  // show the shapes as given.
  std::vector<TensorType> in(given.begin(), given.end());
  for (int i = 0; bthd && i < fixed && i < static_cast<int>(in.size()); ++i) {
    if (i != 5) in[size_t(i)].shape = swap_heads_and_positions(in[size_t(i)].shape);
  }
  auto as_given = [&](const Shape& s) { return bthd ? swap_heads_and_positions(s) : s; };
  const TensorType& q = in[0];
  const TensorType& k = in[1];
  require_f32(q, "q");
  AttentionDims d;
  d.batch = q.shape[0];
  d.heads = q.shape[1];
  d.seq = q.shape[2];
  d.head_dim = q.shape[3];
  require_f32(k, "k");
  require(k.shape.size() == 4 && k.shape[0] == d.batch && k.shape[2] == d.seq &&
              k.shape[3] == d.head_dim,
          fmt::format("k is {}; expected [{}] to match q {}", given[1].str(),
                      bthd ? fmt::format("{}, {}, kv_heads, {}", d.batch, d.seq, d.head_dim)
                           : fmt::format("{}, kv_heads, {}, {}", d.batch, d.seq, d.head_dim),
                      given[0].str()));
  d.kv_heads = k.shape[1];
  require(d.kv_heads >= 1 && d.heads % d.kv_heads == 0,
          fmt::format("q has {} heads but k has {}; the query heads must be a multiple of the "
                      "kv heads (grouped-query attention)",
                      d.heads, d.kv_heads));
  const Shape rows = {d.batch, d.heads, d.seq};
  for (int i = 2; i < fixed; ++i) {
    const TensorType& t = in[static_cast<size_t>(i)];
    require_f32(t, kNames[i]);
    const Shape want = i == 2 ? k.shape : i == 5 ? rows : q.shape;
    require(t.shape == want,
            fmt::format("{} is {}; expected shape {}", kNames[i], given[size_t(i)].str(),
                        shape_str(i == 5 ? want : as_given(want))));
  }
  d.layout = layout;
  d.docs = static_cast<int>(in.size()) > fixed;
  if (d.docs) {
    const TensorType& doc = in.back();
    require(is_int(doc.dtype) && doc.shape == Shape{d.batch, d.seq},
            fmt::format("doc ids are {}; expected i32 or i64 [{}, {}] (a document id per "
                        "position)",
                        doc.str(), d.batch, d.seq));
  }
  return d;
}

TensorType infer_attention(Op op, std::span<const TensorType> in, const Attrs& a) {
  const double scale = a.f("scale");
  require(std::isfinite(scale), fmt::format("scale {} must be finite", scale));
  const AttentionDims d = attention_dims(op, in, attention_layout(a));
  switch (op) {
    case Op::attention:
    case Op::attention_dq:
      return in[0];
    case Op::attention_lse:
      return {DType::f32, {d.batch, d.heads, d.seq}};
    default:  // dk, dv
      return in[1];
  }
}

SparseAttentionDims sparse_attention_dims(Op op, std::span<const TensorType> in) {
  const TensorType& q = in[0];
  const TensorType& k = in[1];
  require_f32(q, "q");
  require(q.shape.size() == 4,
          fmt::format("q is {}; expected rank 4 [batch, seq, heads, head_dim]", q.str()));
  SparseAttentionDims d;
  d.batch = q.shape[0];
  d.seq = q.shape[1];
  d.heads = q.shape[2];
  d.head_dim = q.shape[3];
  require_f32(k, "k");
  require(k.shape.size() == 4 && k.shape[0] == d.batch && k.shape[1] == d.seq &&
              k.shape[3] == d.head_dim,
          fmt::format("k is {}; expected [{}, {}, kv_heads, {}] to match q {}", k.str(), d.batch,
                      d.seq, d.head_dim, q.str()));
  d.kv_heads = k.shape[2];
  require(d.kv_heads >= 1 && d.heads % d.kv_heads == 0,
          fmt::format("q has {} heads but k has {}; the query heads must be a multiple of the "
                      "kv heads (grouped-query attention)",
                      d.heads, d.kv_heads));
  const bool weights = op == Op::sparse_attention_weights;
  if (!weights) {
    require_f32(in[2], "v");
    require(in[2].shape == k.shape,
            fmt::format("v is {}; expected shape {} (as k)", in[2].str(), shape_str(k.shape)));
  }
  if (op != Op::sparse_attention && !weights) {
    require_f32(in[3], "dout");
    require(in[3].shape == q.shape,
            fmt::format("dout is {}; expected shape {} (as q)", in[3].str(), shape_str(q.shape)));
  }
  const TensorType& keys = in.back();
  require(is_int(keys.dtype) && keys.shape.size() == 3 && keys.shape[0] == d.batch &&
              keys.shape[1] == d.seq && keys.shape[2] >= 1,
          fmt::format("keys is {}; expected i32 or i64 [{}, {}, S >= 1] (the key positions "
                      "each query attends)",
                      keys.str(), d.batch, d.seq));
  d.keys = keys.shape[2];
  return d;
}

TensorType infer_sparse_attention(Op op, std::span<const TensorType> in, const Attrs& a) {
  const double scale = a.f("scale");
  require(std::isfinite(scale), fmt::format("scale {} must be finite", scale));
  const SparseAttentionDims d = sparse_attention_dims(op, in);
  switch (op) {
    case Op::sparse_attention:
    case Op::sparse_attention_dq:
      return in[0];
    case Op::sparse_attention_weights:
      return {DType::f32, {d.batch, d.seq, d.keys}};
    default:  // dk, dv
      return in[1];
  }
}

}  // namespace keel
