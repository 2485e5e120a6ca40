#include "trace/collectives.h"

#include <fmt/format.h>

#include <mutex>

#include "ir/error.h"
#include "trace/emit.h"

namespace keel {
namespace {

std::mutex mesh_mutex;
std::map<std::string, int64_t> mesh_axes;

Attrs axis_attrs(const std::string& axis, const SourceLoc& loc) {
  return {{"axis", axis}, {"axis_size", trace_axis_size(axis, loc)}};
}

}  // namespace

void set_trace_mesh(std::map<std::string, int64_t> axes) {
  std::lock_guard lock(mesh_mutex);
  mesh_axes = std::move(axes);
}

int64_t trace_axis_size(const std::string& axis, const SourceLoc& loc) {
  std::lock_guard lock(mesh_mutex);
  auto it = mesh_axes.find(axis);
  if (it != mesh_axes.end()) return it->second;
  // Over one device every axis, named or not, has size 1.
  int64_t devices = 1;
  for (const auto& [name, size] : mesh_axes) devices *= size;
  if (devices == 1) return 1;
  std::string names;
  for (const auto& [name, size] : mesh_axes) names += (names.empty() ? "" : ", ") + name;
  throw Error(
      fmt::format("[trace] collective over axis '{}' at {}, but the mesh's axes are {}; "
                  "name one of them or add it to spmd.mesh_axes",
                  axis, loc.str(), names));
}

Tensor all_reduce(const Tensor& x, const std::string& axis, ReduceKind kind, SourceLoc loc) {
  Attrs a = axis_attrs(axis, loc);
  a.set("reduce", std::string(reduce_kind_name(kind)));
  return detail::emit(Op::all_reduce, {x}, std::move(a), loc);
}

Tensor all_gather(const Tensor& x, const std::string& axis, int64_t dim, SourceLoc loc) {
  Attrs a = axis_attrs(axis, loc);
  a.set("dim", dim);
  a.set("invariant", int64_t{0});
  return detail::emit(Op::all_gather, {x}, std::move(a), loc);
}

Tensor all_gather_invariant(const Tensor& x, const std::string& axis, int64_t dim, SourceLoc loc) {
  Attrs a = axis_attrs(axis, loc);
  a.set("dim", dim);
  a.set("invariant", int64_t{1});
  return detail::emit(Op::all_gather, {x}, std::move(a), loc);
}

Tensor reduce_scatter(const Tensor& x, const std::string& axis, int64_t dim, SourceLoc loc) {
  Attrs a = axis_attrs(axis, loc);
  a.set("dim", dim);
  return detail::emit(Op::reduce_scatter, {x}, std::move(a), loc);
}

Tensor all_to_all(const Tensor& x, const std::string& axis, int64_t dim, SourceLoc loc) {
  Attrs a = axis_attrs(axis, loc);
  if (a.i("axis_size") == 1) return x;  // one process sends every block to itself
  a.set("dim", dim);
  return detail::emit(Op::all_to_all, {x}, std::move(a), loc);
}

Tensor pvary(const Tensor& x, const std::string& axis, SourceLoc loc) {
  Attrs a = axis_attrs(axis, loc);
  if (a.i("axis_size") == 1) return x;  // one process: its share is the whole
  return detail::emit(Op::pvary, {x}, std::move(a), loc);
}

Tensor matmul_partial(const Tensor& a, const Tensor& b, const std::string& axis, SourceLoc loc) {
  trace_axis_size(axis, loc);  // an axis the mesh has
  const DotDims d = matmul_dims(a, b, loc);
  return detail::emit(Op::dot_general, {a, b},
                      {{"lhs_batch", d.lhs_batch},
                       {"rhs_batch", d.rhs_batch},
                       {"lhs_contract", d.lhs_contract},
                       {"rhs_contract", d.rhs_contract},
                       {"partial", axis}},
                      loc);
}

Tensor axis_index(const std::string& axis, SourceLoc loc) {
  return detail::emit(Op::axis_index, {}, axis_attrs(axis, loc), loc);
}

}  // namespace keel
