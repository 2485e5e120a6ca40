#pragma once
/// @file
/// The mesh from the launch policy. With spmd off it is one axis "data" over every process.
/// Every process of a launch is one device, so the mesh's size must equal the process count.
#include <cstdint>
#include <string>
#include <vector>

#include "dist/mesh.h"
#include "policy/launch_policy.h"

namespace keel::runtime {

using dist::Mesh;

/// Processes in this launch, from MPI's world (1 without a launcher).
int64_t launch_process_count();
/// spmd.mesh_axes/mesh_shape when spmd.enabled, else one axis "data" over every process.
Mesh mesh_from_policy(const policy::LaunchPolicy& policy, int64_t processes);
/// Checks `mesh` for a launch of `processes` processes: keel::InputError when the axes and sizes
/// disagree, a size is < 1, or the mesh's size is not `processes`; `where` names what asked for the
/// mesh.
void check_mesh(const Mesh& mesh, int64_t processes, const std::string& where);

}  // namespace keel::runtime
