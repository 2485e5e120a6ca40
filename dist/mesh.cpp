#include "dist/mesh.h"

#include <fmt/format.h>

#include "dist/deadline.h"
#include "dist/fixed_order.h"
#include "ir/error.h"

namespace keel::dist {

int64_t Mesh::size() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string Mesh::str() const {
  std::string out;
  for (size_t i = 0; i < axes.size() && i < shape.size(); ++i) {
    out += fmt::format("{}{}={}", out.empty() ? "" : ",", axes[i], shape[i]);
  }
  return out;
}

int64_t Mesh::axis_size(const std::string& axis) const {
  for (size_t i = 0; i < axes.size() && i < shape.size(); ++i) {
    if (axes[i] == axis) return shape[i];
  }
  return 0;
}

std::vector<int64_t> Mesh::coordinates(int64_t rank) const {
  std::vector<int64_t> c(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    c[i] = rank % shape[i];
    rank /= shape[i];
  }
  return c;
}

MeshCollectives::MeshCollectives(Communicator& world, Mesh mesh)
    : mesh_(std::move(mesh)), one_(one_process_communicator()) {
  if (mesh_.size() != world.size()) {
    throw Error(fmt::format("[dist] mesh {} has {} devices but the world has {} processes",
                            mesh_.str(), mesh_.size(), world.size()));
  }
  coords_ = mesh_.coordinates(world.rank());
  for (size_t a = 0; a < mesh_.axes.size(); ++a) {
    // The processes that differ from this one only on axis a share a communicator.
    int64_t color = 0;
    for (size_t i = 0; i < coords_.size(); ++i) {
      color = color * mesh_.shape[i] + (i == a ? 0 : coords_[i]);
    }
    axis_comm_[mesh_.axes[a]] = world.split(static_cast<int>(color), static_cast<int>(coords_[a]));
  }
}

Communicator& MeshCollectives::along(const std::string& axis) const {
  auto it = axis_comm_.find(axis);
  if (it == axis_comm_.end() && mesh_.size() == 1) return *one_;  // any axis of one device
  if (it == axis_comm_.end()) {
    throw Error(
        fmt::format("[collective] mesh {} has no axis '{}'; name one of its axes or set "
                    "spmd.mesh_axes",
                    mesh_.str(), axis));
  }
  return *it->second;
}

int64_t MeshCollectives::axis_size(const std::string& axis) const {
  return along(axis).size();
}

int64_t MeshCollectives::axis_index(const std::string& axis) const {
  return along(axis).rank();
}

void MeshCollectives::all_reduce(const std::string& axis, ReduceKind kind, DType dtype,
                                 const void* in, void* out, int64_t count) {
  WaitScope scope(fmt::format("all_reduce over '{}'", axis));
  dist::all_reduce(along(axis), kind, dtype, in, out, count);
}

void MeshCollectives::all_gather(const std::string& axis, DType dtype, const void* in, void* out,
                                 int64_t count) {
  WaitScope scope(fmt::format("all_gather over '{}'", axis));
  dist::all_gather(along(axis), dtype, in, out, count);
}

void MeshCollectives::reduce_scatter(const std::string& axis, DType dtype, const void* in,
                                     void* out, int64_t count) {
  WaitScope scope(fmt::format("reduce_scatter over '{}'", axis));
  dist::reduce_scatter(along(axis), dtype, in, out, count);
}

void MeshCollectives::all_to_all(const std::string& axis, DType dtype, const void* in, void* out,
                                 int64_t count) {
  WaitScope scope(fmt::format("all_to_all over '{}'", axis));
  along(axis).all_to_all(in, out, static_cast<size_t>(count) * dtype_size(dtype));
}

}  // namespace keel::dist
