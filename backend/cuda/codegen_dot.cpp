// dot_general: float products become cuBLASLt calls (GemmCall) over the operands where they lie
// when each matrix has a unit stride and a leading dimension, else over a row-major copy a
// generated kernel makes in arena scratch ([batch, free, contract] for the lhs, [batch,
// contract, free] for the rhs); integer products are a generated kernel, one thread per output
// element summing in uint64 (wrapping as the reference's int64 sums).
#include <numeric>

#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/codegen_internal.h"

namespace keel::cuda::gen {
namespace {

std::vector<int64_t> free_dims(size_t rank, const std::vector<int64_t>& batch,
                               const std::vector<int64_t>& contract) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(rank); ++d) {
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contract.begin(), contract.end(), d) == contract.end()) {
      out.push_back(d);
    }
  }
  return out;
}

int64_t extent(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= s[static_cast<size_t>(d)];
  return n;
}

// One stride that walks `dims` (in this order) as a single index, if there is one.
std::optional<int64_t> merged_stride(const Shape& s, const std::vector<int64_t>& st,
                                     const std::vector<int64_t>& dims) {
  std::optional<int64_t> stride;  // the innermost walked dim's
  int64_t expect = 0;             // the stride the next dim out must have
  for (size_t i = dims.size(); i-- > 0;) {
    const auto d = static_cast<size_t>(dims[i]);
    if (s[d] == 1) continue;
    if (stride && st[d] != expect) return std::nullopt;
    if (!stride) stride = st[d];
    expect = st[d] * s[d];
  }
  return stride ? *stride : 1;
}

std::vector<int64_t> batch_offsets(const Shape& s, const std::vector<int64_t>& st,
                                   const std::vector<int64_t>& batch) {
  std::vector<int64_t> out{0};
  for (int64_t d : batch) {
    std::vector<int64_t> next;
    for (int64_t base : out) {
      for (int64_t i = 0; i < s[static_cast<size_t>(d)]; ++i) {
        next.push_back(base + i * st[static_cast<size_t>(d)]);
      }
    }
    out = std::move(next);
  }
  return out;
}

// The matrix over `rows` x `cols` dims of an operand with strides `st`, if strides express it.
std::optional<MatrixLayout> as_matrix(const Shape& s, const std::vector<int64_t>& st,
                                      const std::vector<int64_t>& batch,
                                      const std::vector<int64_t>& rows,
                                      const std::vector<int64_t>& cols) {
  const std::optional<int64_t> rs = merged_stride(s, st, rows), cs = merged_stride(s, st, cols);
  if (!rs || !cs) return std::nullopt;
  MatrixLayout l{extent(s, rows), extent(s, cols), *rs, *cs, batch_offsets(s, st, batch)};
  if (l.rows == 1) l.row_stride = l.cols;  // a degenerate dim's stride is never used
  if (l.cols == 1) l.col_stride = 1;
  if (!GemmCall::blas_layout(l)) return std::nullopt;
  return l;
}

// Copies operand `x` into scratch at `at`, row-major in the order of `dims`; its layout there.
MatrixLayout copy_operand(const Graph& g, const passes::FusionPlan& f, const Places& places,
                          NodeId x, const std::vector<int64_t>& dims, size_t n_batch, size_t n_rows,
                          int64_t at, const std::string& name, Emitted& out) {
  const Shape& s = g.node(x).type.shape;
  const std::vector<int64_t> st = passes::row_major_strides(s);
  Shape shape;
  std::vector<int64_t> strides;
  for (int64_t d : dims) {
    shape.push_back(s[static_cast<size_t>(d)]);
    strides.push_back(st[static_cast<size_t>(d)]);
  }
  Kernel k(g, f, places, name);
  k.launch().block = kBlockThreads;
  k.launch().what = fmt::format("operand copy of {}", c_source::describe(g, x));
  const int64_t total = numel(shape);
  const c_source::Nest nest =
      c_source::build_nest(shape, std::vector<bool>(shape.size(), false),
                           {c_source::Access{shape, strides}, c_source::Access{shape, {}}});
  const std::string src = k.pointer(x, false);
  const std::string dst = k.pointer_to(Slot{Slot::Kind::arena, 0, at}, g.node(x).type.dtype);
  std::string inside;
  const std::vector<std::string> offset = offsets_at(nest, "i", inside, "    ");
  inside += fmt::format("    {}[{}] = {}[{}];\n", dst, offset[1], src, offset[0]);
  out.kernels += loop_kernel(k, total, "", inside);
  out.launches.push_back(k.launch());
  const std::vector<int64_t> batch(dims.begin(), dims.begin() + std::ptrdiff_t(n_batch));
  const std::vector<int64_t> rows(dims.begin() + std::ptrdiff_t(n_batch),
                                  dims.begin() + std::ptrdiff_t(n_batch + n_rows));
  const std::vector<int64_t> cols(dims.begin() + std::ptrdiff_t(n_batch + n_rows), dims.end());
  MatrixLayout l{extent(s, rows), extent(s, cols), extent(s, cols), 1, {}};
  for (int64_t b = 0; b < extent(s, batch); ++b) l.batch_offsets.push_back(b * l.rows * l.cols);
  if (l.batch_offsets.empty()) l.batch_offsets.push_back(0);
  return l;
}

// Integer products: out[e] = sum over the contracting index p of lhs * rhs, in uint64.
void emit_int_dot(Kernel& k, NodeId id, Emitted& out) {
  const Graph& g = k.graph();
  const Node& n = g.node(id);
  const NodeId l = n.inputs[0], r = n.inputs[1];
  const Shape &ls = g.node(l).type.shape, &rs = g.node(r).type.shape;
  const std::vector<int64_t>&lb = n.attrs.ints("lhs_batch"), &rb = n.attrs.ints("rhs_batch");
  const std::vector<int64_t>&lc = n.attrs.ints("lhs_contract"), &rc = n.attrs.ints("rhs_contract");
  const std::vector<int64_t> lf = free_dims(ls.size(), lb, lc), rf = free_dims(rs.size(), rb, rc);
  const std::vector<int64_t> lst = passes::row_major_strides(ls),
                             rst = passes::row_major_strides(rs);
  const Shape& os = n.type.shape;
  const int64_t total = numel(os), count = extent(ls, lc);
  k.launch().block = kBlockThreads;
  k.launch().what = fmt::format("integer product {}", c_source::describe(g, id));
  if (total == 0) return;
  std::string inside;
  std::vector<std::string> o(os.size()), c(lc.size());
  int64_t below = 1;
  for (size_t d = os.size(); d-- > 0;) {
    o[d] = fmt::format("o{}", d);
    inside += fmt::format("    const int64_t o{} = (i / {}) % {};\n", d, below, os[d]);
    below *= os[d];
  }
  std::string lo, ro;
  auto term = [](std::string& sum, const std::string& idx, int64_t stride) {
    sum += fmt::format("{}{} * {}", sum.empty() ? "" : " + ", idx, stride);
  };
  for (size_t j = 0; j < lb.size(); ++j) {
    term(lo, o[j], lst[static_cast<size_t>(lb[j])]);
    term(ro, o[j], rst[static_cast<size_t>(rb[j])]);
  }
  for (size_t j = 0; j < lf.size(); ++j)
    term(lo, o[lb.size() + j], lst[static_cast<size_t>(lf[j])]);
  for (size_t j = 0; j < rf.size(); ++j) {
    term(ro, o[lb.size() + lf.size() + j], rst[static_cast<size_t>(rf[j])]);
  }
  std::string inner;
  below = 1;
  for (size_t j = lc.size(); j-- > 0;) {
    const int64_t size = ls[static_cast<size_t>(lc[j])];
    inner += fmt::format("      const int64_t c{} = (p / {}) % {};\n", j, below, size);
    below *= size;
    term(lo, fmt::format("c{}", j), lst[static_cast<size_t>(lc[j])]);
    term(ro, fmt::format("c{}", j), rst[static_cast<size_t>(rc[j])]);
  }
  const std::string a = k.pointer(l, false), b = k.pointer(r, false);
  inside += "    uint64_t acc = 0;\n";
  inside += fmt::format("    for (int64_t p = 0; p < {}LL; ++p) {{\n{}", count, inner);
  inside +=
      fmt::format("      acc += uint64_t(int64_t({}[{}])) * uint64_t(int64_t({}[{}]));\n    }}\n",
                  a, lo.empty() ? "0" : lo, b, ro.empty() ? "0" : ro);
  const std::string stored = n.type.dtype == DType::i32 ? "int32_t(uint32_t(acc))" : "int64_t(acc)";
  inside += fmt::format("    {}[i] = {};\n", k.pointer(id, true), stored);
  out.kernels += loop_kernel(k, total, "", inside);
  out.launches.push_back(k.launch());
}

}  // namespace

void emit_dot(const Graph& g, const passes::FusionPlan& f, const Places& places, NodeId id,
              int64_t scratch_at, const std::string& name, Emitted& out,
              const ProductEpilogue* epilogue) {
  const Node& n = g.node(id);
  const NodeId l = n.inputs[0], r = n.inputs[1];
  const DType operand = g.node(l).type.dtype;
  if (numel(n.type.shape) == 0) return;
  if (!is_float(operand)) {
    Kernel k(g, f, places, name);
    emit_int_dot(k, id, out);
    return;
  }
  const Shape &ls = g.node(l).type.shape, &rs = g.node(r).type.shape;
  const std::vector<int64_t>&lb = n.attrs.ints("lhs_batch"), &rb = n.attrs.ints("rhs_batch");
  const std::vector<int64_t>&lc = n.attrs.ints("lhs_contract"), &rc = n.attrs.ints("rhs_contract");
  const std::vector<int64_t> lf = free_dims(ls.size(), lb, lc), rf = free_dims(rs.size(), rb, rc);
  Kernel k(g, f, places, name);
  Launch& launch = k.launch();
  launch.what = fmt::format("product {}", c_source::describe(g, id));
  GemmCall call;
  call.batch = extent(ls, lb);
  call.m = extent(ls, lf);
  call.n = extent(rs, rf);
  call.k = extent(ls, lc);
  call.operand = operand;
  call.result = n.type.dtype;
  const int64_t esize = dtype_size(operand);
  const int64_t align = 256;
  int64_t at = scratch_at;
  // Where the operand lies, or a copy in scratch: constants have no device address to hand over.
  auto place = [&](NodeId x, const std::vector<int64_t>& batch, const std::vector<int64_t>& rows,
                   const std::vector<int64_t>& cols, const char* side) {
    const Shape& s = g.node(x).type.shape;
    const std::optional<Slot> slot = k.slot_of(x);  // none for a constant (or a view of one)
    std::optional<MatrixLayout> lay;
    if (slot) lay = as_matrix(s, passes::row_major_strides(s), batch, rows, cols);
    if (lay) {
      launch.args.push_back(*slot);
      return *lay;
    }
    std::vector<int64_t> dims = batch;
    dims.insert(dims.end(), rows.begin(), rows.end());
    dims.insert(dims.end(), cols.begin(), cols.end());
    const MatrixLayout copied = copy_operand(g, f, places, x, dims, batch.size(), rows.size(), at,
                                             fmt::format("{}_{}", name, side), out);
    launch.args.push_back(Slot{Slot::Kind::arena, 0, at});
    at += (numel(s) * esize + align - 1) / align * align;
    return copied;
  };
  call.a = place(l, std::vector<int64_t>(lb.begin(), lb.end()), lf,
                 std::vector<int64_t>(lc.begin(), lc.end()), "a");
  call.b = place(r, std::vector<int64_t>(rb.begin(), rb.end()),
                 std::vector<int64_t>(rc.begin(), rc.end()), rf, "b");
  const std::optional<Slot> c = k.slot_of(epilogue ? epilogue->into : id);
  if (!c) fail("internal: {} has no buffer", c_source::describe(g, id));
  launch.args.push_back(*c);
  if (epilogue && epilogue->kind != GemmCall::Addend::none) {
    const std::optional<Slot> addend = k.slot_of(epilogue->addend);
    if (!addend) fail("internal: the addend of {} has no buffer", c_source::describe(g, id));
    launch.args.push_back(*addend);
    call.addend = epilogue->kind;
    launch.what = fmt::format("product {} plus {}", c_source::describe(g, id),
                              c_source::describe(g, epilogue->addend));
  }
  if (epilogue && epilogue->activation != GemmCall::Activation::none) {
    call.activation = epilogue->activation;
    launch.what +=
        epilogue->activation == GemmCall::Activation::gelu ? ", GELU" : ", GELU's gradient";
    if (epilogue->aux >= 0) {
      const std::optional<Slot> aux = k.slot_of(epilogue->aux);
      if (!aux) fail("internal: the GELU input of {} has no buffer", c_source::describe(g, id));
      launch.args.push_back(*aux);
      call.aux = true;
      launch.what += fmt::format(" (GELU input {})", c_source::describe(g, epilogue->aux));
    }
  }
  launch.gemm = call;
  launch.grid = 0;
  out.launches.push_back(launch);
  out.scratch_bytes = std::max(out.scratch_bytes, at - scratch_at);
}

}  // namespace keel::cuda::gen
