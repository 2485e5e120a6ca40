// Ops that are not loops call into the kernel table libkeel passes to keel_run (abi.h): GEMM,
// layout moves, indexing, scans, random numbers. Shapes and attributes are static literals.
#include <algorithm>
#include <bit>
#include <cmath>

#include "backend/collectives.h"
#include "backend/cpu/abi.h"
#include "backend/cpu/codegen_internal.h"
#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/target.h"
#include "ir/attention.h"
#include "ir/collective.h"

namespace keel::cpu::gen {
namespace {

// Any bytes as a C string literal: octal escapes take at most three digits, so none runs on.
std::string c_string(const std::string& bytes) {
  std::string out = "\"";
  for (unsigned char ch : bytes) out += fmt::format("\\{:03o}", ch);
  return out + "\"";
}

std::vector<int64_t> row_major(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

class Call {
 public:
  // `readers`: the nodes this call computes (the unit's root and the ones joined to it).
  Call(const Graph& g, const Buffers& b, NodeId id, std::vector<NodeId> readers)
      : g_(g), b_(b), id_(id), readers_(std::move(readers)) {}

  // A keel_view over node `v`'s buffer; returns its name. `swap_heads`: a [B, T, H, D] operand
  // of a bthd attention op, passed as the [B, H, T, D] view the kernels index.
  std::string view(NodeId v, bool swap_heads = false) {
    const TensorType& t = g_.node(v).type;
    if (t.shape.size() > KEEL_MAX_RANK) {
      fail(
          "{} has an operand of rank {}, but kernels take at most {} dims; reshape it to fewer "
          "dims before this op",
          describe(g_, id_), t.shape.size(), KEEL_MAX_RANK);
    }
    Shape shape = t.shape;
    const std::string name = fmt::format("x{}", n_++);
    // A strided view (a folded transpose, slice or broadcast) passes its strides.
    std::string strides;
    const passes::View* view = b_.view(v);
    if (view && !view->contiguous) {
      bool ok = false;
      for (NodeId r : readers_) {
        const Node& reader = g_.node(r);
        ok = ok || (r == v && writes_view(reader, *view));  // a result it stores
        for (size_t i = 0; i < reader.inputs.size() && !ok; ++i) {
          ok = reader.inputs[i] == v && reads_view(reader, i, *view);
        }
      }
      if (!ok) {
        fail(
            "internal: {} reads the strided view %{}; only loops, dot_general, layout copies and "
            "attention's row-contiguous operands take strides",
            describe(g_, id_), v);
      }
    }
    if ((view && !view->contiguous) || swap_heads) {
      std::vector<int64_t> st = view && !view->contiguous ? view->strides : row_major(shape);
      if (swap_heads) {
        shape = swap_heads_and_positions(shape);
        std::swap(st[1], st[2]);
      }
      strides = fmt::format(", {{{}}}, 1", fmt::join(st, ", "));
    }
    std::string dims;
    for (int64_t d : shape) dims += fmt::format("{}{}", dims.empty() ? "" : ", ", d);
    s_ += fmt::format("    keel_view {} = {{(void*)v{}, {}, {}, {{{}}}{}}};\n", name, v,
                      static_cast<int>(t.dtype), shape.size(), dims.empty() ? "0" : dims, strides);
    return "&" + name;
  }
  std::string ints(const std::vector<int64_t>& v) {
    if (v.empty()) return "nullptr";
    std::string list;
    for (int64_t x : v) list += fmt::format("{}{}LL", list.empty() ? "" : ", ", x);
    const std::string name = fmt::format("a{}", n_++);
    s_ += fmt::format("    static const int64_t {}[] = {{{}}};\n", name, list);
    return name;
  }
  void call(const std::string& fn, const std::vector<std::string>& args) {
    std::string list;
    for (const std::string& a : args) list += (list.empty() ? "" : ", ") + a;
    s_ += fmt::format("    k->{}({});\n", fn, list);
  }
  void line(const std::string& text) { s_ += "    " + text + "\n"; }
  std::string text() const { return s_; }

 private:
  const Graph& g_;
  const Buffers& b_;
  NodeId id_;
  std::vector<NodeId> readers_;
  int n_ = 0;
  std::string s_;
};

std::string double_text(double d) {
  if (!std::isfinite(d)) {
    return fmt::format("__builtin_bit_cast(double, 0x{:016x}ull)", std::bit_cast<uint64_t>(d));
  }
  return fmt::format("{:a}", d);
}

std::string num(int64_t v) {
  return fmt::format("{}", v);
}

// dot_general's precision argument, spelled as the ABI's macro so the generated call reads.
std::string precision_text(int32_t precision) {
  if (precision == KEEL_MATMUL_F32) return "KEEL_MATMUL_F32";
  if (precision == KEEL_MATMUL_BF16) return "KEEL_MATMUL_BF16";
  fail("internal: matmul precision {} is neither KEEL_MATMUL_F32 nor KEEL_MATMUL_BF16", precision);
}

// A view with a shape (and strides, for a strided view) and no data: what the kernels' scratch
// functions read.
keel_view shape_view(const TensorType& t, const passes::View* view) {
  keel_view v{nullptr, static_cast<int32_t>(t.dtype), static_cast<int32_t>(t.shape.size()), {}, {},
              0};
  for (size_t d = 0; d < t.shape.size() && d < KEEL_MAX_RANK; ++d) {
    v.shape[d] = t.shape[d];
    if (view && !view->contiguous) v.stride[d] = view->strides[d];
  }
  v.strided = view && !view->contiguous ? 1 : 0;
  return v;
}

}  // namespace

std::string emit_kernel(const Graph& g, const Buffers& b, const Unit& u,
                        const CodegenOptions& options) {
  const NodeId id = u.root;
  const Node& n = g.node(id);
  std::string head = fmt::format("  // group {} (kernel): {}\n", u.group, describe(g, id));
  for (NodeId also : u.also)
    head += fmt::format("  // and, in the same call: {}\n", describe(g, also));
  if (numel(n.type.shape) == 0) return head;
  std::vector<NodeId> readers = {id};
  readers.insert(readers.end(), u.also.begin(), u.also.end());
  Call c(g, b, id, std::move(readers));
  const auto& in = n.inputs;
  const Attrs& at = n.attrs;
  switch (n.op) {
    case Op::reshape:
      c.call("copy", {c.view(in[0]), c.view(id)});
      break;
    case Op::broadcast:
      c.call("broadcast", {c.view(in[0]), c.view(id)});
      break;
    case Op::transpose:
      c.call("transpose", {c.view(in[0]), c.view(id), c.ints(at.ints("perm"))});
      break;
    case Op::slice:
      c.call("slice",
             {c.view(in[0]), c.view(id), c.ints(at.ints("start")), c.ints(at.ints("stride"))});
      break;
    case Op::concat: {
      // Operands stored in place by their producers (concat_in_place): nothing to move.
      // A concat nested in another's buffer shares that storage with its operands.
      if (std::all_of(in.begin(), in.end(),
                      [&](NodeId x) { return b.storage_of(x) == b.storage_of(id); })) {
        return head + "  // every operand was written in place\n";
      }
      std::string list;
      for (NodeId x : in) list += (list.empty() ? "" : ", ") + c.view(x);
      const std::string out = c.view(id);
      c.line("const keel_view* ins[] = {" + list + "};");
      c.call("concat", {"ins", num(static_cast<int64_t>(in.size())), out, num(at.i("axis"))});
      break;
    }
    case Op::pad:
      c.call("pad",
             {c.view(in[0]), c.view(id), c.ints(at.ints("low")), double_text(at.f("value"))});
      break;
    case Op::gather:
      c.call("gather", {c.view(in[0]), c.view(in[1]), c.view(id), num(at.i("axis"))});
      break;
    case Op::scatter_add:
      c.call("scatter_add",
             {c.view(in[0]), c.view(in[1]), c.view(in[2]), c.view(id), num(at.i("axis"))});
      break;
    case Op::one_hot:
      c.call("one_hot", {c.view(in[0]), c.view(id)});
      break;
    case Op::iota:
      c.call("iota", {c.view(id), num(at.i("dim"))});
      break;
    case Op::rng_uniform:
      c.call("rng_uniform", {c.view(in[0]), c.view(in[1]), c.view(id)});
      break;
    case Op::argmax:
      c.call("argmax", {c.view(in[0]), c.view(id), num(at.i("axis"))});
      break;
    case Op::cumsum:
      c.call("cumsum", {c.view(in[0]), c.view(id), num(at.i("axis")), num(at.i("reverse"))});
      break;
    case Op::top_k_values:
      c.call("top_k", {c.view(in[0]), c.view(id), "nullptr", num(at.i("k")) + "LL"});
      break;
    case Op::top_k_indices:
      c.call("top_k", {c.view(in[0]), "nullptr", c.view(id), num(at.i("k")) + "LL"});
      break;
    case Op::dot_general: {
      const auto& lb = at.ints("lhs_batch");
      const auto& lc = at.ints("lhs_contract");
      c.call("dot_general",
             {c.view(in[0]), c.view(in[1]), c.view(id), c.ints(lb), c.ints(at.ints("rhs_batch")),
              num(static_cast<int64_t>(lb.size())), c.ints(lc), c.ints(at.ints("rhs_contract")),
              num(static_cast<int64_t>(lc.size())), precision_text(options.matmul_precision)});
      break;
    }
    case Op::attention:
    case Op::attention_lse: {
      const bool lse = n.op == Op::attention_lse,
                 bthd = attention_layout(at) == AttentionLayout::bthd;
      const size_t fixed = lse ? 2 : 3;
      const NodeId out = !lse ? id : u.also.empty() ? -1 : u.also[0];  // the attention, if any
      const std::string v = out >= 0 ? c.view(g.node(out).inputs[2], bthd) : "nullptr";
      const std::string doc = in.size() > fixed ? c.view(in[fixed]) : "nullptr";
      c.call("attention", {c.view(in[0], bthd), c.view(in[1], bthd), v, doc,
                           out >= 0 ? c.view(out, bthd) : "nullptr", lse ? c.view(id) : "nullptr",
                           double_text(at.f("scale")), precision_text(options.matmul_precision)});
      break;
    }
    case Op::attention_dq:
    case Op::attention_dk:
    case Op::attention_dv: {
      const bool bthd = attention_layout(at) == AttentionLayout::bthd;
      std::vector<std::string> args;
      for (size_t i = 0; i < 6; ++i) args.push_back(c.view(in[i], bthd && i != 5));  // 5: lse
      args.push_back(in.size() > 6 ? c.view(in[6]) : "nullptr");
      for (Op o : {Op::attention_dq, Op::attention_dk, Op::attention_dv}) {
        auto also =
            std::find_if(u.also.begin(), u.also.end(), [&](NodeId a) { return g.node(a).op == o; });
        args.push_back(o == n.op              ? c.view(id, bthd)
                       : also != u.also.end() ? c.view(*also, bthd)
                                              : "nullptr");
      }
      args.push_back(double_text(at.f("scale")));
      args.push_back(precision_text(options.matmul_precision));
      c.call("attention_grad", args);
      break;
    }
    case Op::sparse_attention:
    case Op::sparse_attention_dq:
    case Op::sparse_attention_dk:
    case Op::sparse_attention_dv:
    case Op::sparse_attention_weights: {
      const int32_t code = n.op == Op::sparse_attention      ? 0
                           : n.op == Op::sparse_attention_dq ? 1
                           : n.op == Op::sparse_attention_dk ? 2
                           : n.op == Op::sparse_attention_dv ? 3
                                                             : 4;
      const bool gradient = code >= 1 && code <= 3;
      c.call("sparse_attention",
             {c.view(in[0]), c.view(in[1]), code == 4 ? "nullptr" : c.view(in[2]),
              gradient ? c.view(in[3]) : "nullptr", c.view(in.back()), c.view(id), num(code),
              double_text(at.f("scale"))});
      break;
    }
    case Op::all_reduce:
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all:
    case Op::axis_index: {
      const int32_t code = n.op == Op::all_reduce       ? 0
                           : n.op == Op::all_gather     ? 1
                           : n.op == Op::reduce_scatter ? 2
                           : n.op == Op::axis_index     ? 3
                                                        : 4;
      const std::string reduce = n.op == Op::all_reduce ? at.s("reduce") : "sum";
      c.call("collective",
             {in.empty() ? "nullptr" : c.view(in[0]), c.view(id), num(code), c_string(at.s("axis")),
              num(at.i("axis_size")) + "LL", num(static_cast<int64_t>(parse_reduce_kind(reduce))),
              num(at.has("dim") ? at.i("dim") : 0)});
      break;
    }
    default:
      fail("internal: {} has no kernel; codegen should have emitted a loop", describe(g, id));
  }
  return head + "  {\n" + c.text() + "  }\n";
}

int64_t kernel_scratch_bytes(const Graph& g, const Buffers& b, NodeId id,
                             const CodegenOptions& options) {
  const Node& n = g.node(id);
  if (numel(n.type.shape) == 0) return 0;
  std::vector<keel_view> v;
  for (NodeId in : n.inputs) v.push_back(shape_view(g.node(in).type, b.view(in)));
  const keel_view out = shape_view(n.type, nullptr);
  const Attrs& at = n.attrs;
  if (op_info(n.op).kind == OpKind::Collective) {
    return backend::collective_scratch_bytes(n.op, at,
                                             n.inputs.empty() ? n.type : g.node(n.inputs[0]).type);
  }
  switch (n.op) {
    case Op::dot_general: {
      const auto &lb = at.ints("lhs_batch"), &rb = at.ints("rhs_batch");
      const auto &lc = at.ints("lhs_contract"), &rc = at.ints("rhs_contract");
      return detail::dot_general_scratch(&v[0], &v[1], &out, lb.data(), rb.data(),
                                         static_cast<int32_t>(lb.size()), lc.data(), rc.data(),
                                         static_cast<int32_t>(lc.size()), options.matmul_precision);
    }
    case Op::gather:
      return detail::gather_scratch(&v[1]);
    case Op::scatter_add:
      return detail::scatter_add_scratch(&v[0], &v[1], static_cast<int32_t>(at.i("axis")));
    case Op::top_k_values:
    case Op::top_k_indices:
      return detail::top_k_scratch(&v[0]);
    case Op::attention:
    case Op::attention_lse:
    case Op::attention_dq:
    case Op::attention_dk:
    case Op::attention_dv: {
      keel_view q = v[0];  // the kernels' [B, H, T, D] order
      if (attention_layout(at) == AttentionLayout::bthd) std::swap(q.shape[1], q.shape[2]);
      return detail::attention_scratch(&q, options.matmul_precision);
    }
    case Op::sparse_attention:
    case Op::sparse_attention_dq:
    case Op::sparse_attention_dk:
    case Op::sparse_attention_dv:
    case Op::sparse_attention_weights:
      return detail::sparse_attention_scratch(&v.back());
    default:
      return 0;
  }
}

}  // namespace keel::cpu::gen
