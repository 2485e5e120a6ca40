#include "policy/features.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/error.h"

namespace keel::policy {

std::vector<Feature> general_features() {
  std::vector<Feature> out;
  out.push_back({"scan_layers", true,
                 "repeated blocks are traced once and looped inside the program over stacked "
                 "parameters (keel::scan); set launch.layer_layout = scanned to train that way",
                 "layers are unrolled into the program"});
  // keel links Open MPI (dist/); MPI starts only under a launcher.
  out.push_back({"mpi", true,
                 "Open MPI is linked: `mpirun -np N keel train` runs data parallel over the mesh "
                 "axis data; without a launcher keel is one process and never initialises MPI",
                 "one process"});
  return out;
}

Feature find_feature(const std::vector<Feature>& table, const std::string& name) {
  std::vector<std::string> names;
  for (const Feature& f : table) {
    if (f.name == name) return f;
    names.push_back(f.name);
  }
  throw InputError(
      fmt::format("[features] unknown feature '{}'; features: {}", name, fmt::join(names, ", ")));
}

}  // namespace keel::policy
