#pragma once
// Optional features and whether this build on this machine has them. Asking for one that is
// unavailable warns and falls back, or is an error, per features.on_unavailable; it is never
// silently ignored. Backends judge their own features (runtime's feature_table lists them all).
#include <string>
#include <vector>

namespace keel::policy {

struct Feature {
  std::string name;
  bool available = false;
  std::string why;       // what makes it available, or what is missing and how to get it
  std::string fallback;  // what runs instead when unavailable
};

// The features that do not depend on a backend: scan_layers and mpi.
std::vector<Feature> general_features();
// The feature `name` in `table`; keel::InputError naming the table's features when absent.
Feature find_feature(const std::vector<Feature>& table, const std::string& name);

}  // namespace keel::policy
