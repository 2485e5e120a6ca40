#pragma once
// Whether this process gets transparent huge pages on request: the system's mode is not "never",
// and no prctl turned them off (/proc/self/status THP_enabled).
#include <fstream>
#include <string>

namespace keel::testing_support {

inline bool huge_pages_on_request() {
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(mode, modes);
  if (modes.empty() || modes.find("[never]") != std::string::npos) return false;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("THP_enabled:", 0) == 0) return line.find('1') != std::string::npos;
  }
  return true;
}

}  // namespace keel::testing_support
