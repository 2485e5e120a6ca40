#include "files/memory_limit.h"

#include <cctype>
#include <optional>
#include <sstream>

#include "files/cgroup.h"

namespace keel::files {
namespace {

// The value after `key` on its own line ("MemTotal:  24000 kB", "hierarchical_memory_limit N").
std::optional<int64_t> field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0 || line.size() == key.size() || !std::isspace(line[key.size()]))
      continue;
    std::istringstream rest(line.substr(key.size()));
    std::string value;
    rest >> value;
    return positive_number(value);
  }
  return std::nullopt;
}

}  // namespace

MemoryLimit memory_limit(const std::string& root) {
  MemoryLimit best;
  if (std::optional<std::string> meminfo = read_limit_file(root + "/proc/meminfo")) {
    if (std::optional<int64_t> kib = field(*meminfo, "MemTotal:")) {
      best = {*kib * 1024, "MemTotal"};
    }
  }
  auto consider = [&](std::optional<int64_t> bytes, const std::string& file) {
    if (bytes && (best.bytes == 0 || *bytes < best.bytes)) {
      best = {*bytes, file.substr(root.size())};
    }
  };
  for (const CgroupDir& dir : cgroup_dirs(root, "memory")) {
    if (dir.v2) {
      const std::string file = dir.path + "/memory.max";
      if (std::optional<std::string> text = read_limit_file(file))
        consider(positive_number(*text), file);
    } else if (std::optional<std::string> stat = read_limit_file(dir.path + "/memory.stat");
               stat && field(*stat, "hierarchical_memory_limit")) {
      consider(field(*stat, "hierarchical_memory_limit"), dir.path + "/memory.stat");
    } else if (std::optional<std::string> text =
                   read_limit_file(dir.path + "/memory.limit_in_bytes")) {
      consider(positive_number(*text), dir.path + "/memory.limit_in_bytes");
    }
  }
  return best;
}

}  // namespace keel::files
