#pragma once
// The cgroup directories whose limits bind this process: for a controller, its group and every
// ancestor up to the mount (cgroup v2: a parent's limit caps its children) or, on cgroup v1,
// the group's directory in the hierarchy that mounts the controller.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace keel::files {

struct CgroupDir {
  std::string path;  // under `root`
  bool v2 = false;
};

// Paths are read under `root` ("" for this machine; tests pass a directory laid out like one:
// proc/self/cgroup, proc/self/mountinfo and the mounts). v1 takes the hierarchy whose mount
// options name `v1_controller` ("memory", "cpu").
std::vector<CgroupDir> cgroup_dirs(const std::string& root, const std::string& v1_controller);

// A small /proc or /sys file, or nullopt when it cannot be read (it then sets no limit).
std::optional<std::string> read_limit_file(const std::string& path);

// A positive decimal, surrounding whitespace allowed; anything else ("max", -1) is none.
std::optional<int64_t> positive_number(std::string_view s);

}  // namespace keel::files
