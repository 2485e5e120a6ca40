#pragma once
// The device mesh: named axes and their sizes. With spmd off it is one device on axis "data".
// Every process of a launch is one device, so the mesh's size must equal the process count.
#include <cstdint>
#include <string>
#include <vector>

#include "policy/launch_policy.h"

namespace keel::runtime {

struct Mesh {
  std::vector<std::string> axes = {"data"};
  std::vector<int64_t> shape = {1};

  int64_t size() const;
  std::string str() const;  // "data=2,model=1"
  bool operator==(const Mesh&) const = default;
};

// Processes in this launch: OMPI_COMM_WORLD_SIZE or PMI_SIZE when an MPI launcher started us,
// else 1.
int64_t launch_process_count();
// spmd.mesh_axes/mesh_shape when spmd.enabled, else the one-device mesh.
Mesh mesh_from_policy(const policy::LaunchPolicy& policy);
// keel::InputError when the axes and sizes disagree, a size is < 1, or the mesh's size is not
// `processes`; `where` names what asked for the mesh.
void check_mesh(const Mesh& mesh, int64_t processes, const std::string& where);

}  // namespace keel::runtime
