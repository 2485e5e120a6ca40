#include "runtime/mesh.h"

#include <fmt/format.h>

#include <set>

#include "ir/error.h"

namespace keel::runtime {

int64_t launch_process_count() {
  return dist::world().size();
}

Mesh mesh_from_policy(const policy::LaunchPolicy& policy, int64_t processes) {
  if (!policy.boolean("spmd.enabled")) return Mesh{{"data"}, {processes}};
  return Mesh{policy.strings("spmd.mesh_axes"), policy.integers("spmd.mesh_shape")};
}

void check_mesh(const Mesh& mesh, int64_t processes, const std::string& where) {
  if (mesh.axes.empty() || mesh.axes.size() != mesh.shape.size()) {
    throw InputError(
        fmt::format("[runtime] {}: a mesh needs one size per axis; got {} axes, {} "
                    "sizes",
                    where, mesh.axes.size(), mesh.shape.size()));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < mesh.axes.size(); ++i) {
    if (mesh.shape[i] < 1 || mesh.axes[i].empty() || !names.insert(mesh.axes[i]).second) {
      throw InputError(fmt::format("[runtime] {}: mesh {} needs distinct axis names and sizes >= 1",
                                   where, mesh.str()));
    }
  }
  if (mesh.size() != processes) {
    throw InputError(
        fmt::format("[runtime] {}: mesh {} has {} devices but this launch has {} process(es); each "
                    "process is one device: launch with mpirun -n {} or change spmd.mesh_shape",
                    where, mesh.str(), mesh.size(), processes, mesh.size()));
  }
}

}  // namespace keel::runtime
