#include "files/cgroup.h"

#include <cctype>
#include <charconv>
#include <sstream>

#include "files/read.h"
#include "ir/error.h"

namespace keel::files {
namespace {

constexpr int64_t kMaxProcFile = 1 << 20;

struct Mount {
  std::string root, point, fstype, options;
};

// /proc/self/mountinfo: "ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER".
std::vector<Mount> cgroup_mounts(const std::string& text) {
  std::vector<Mount> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream left(line.substr(0, dash)), right(line.substr(dash + 3));
    std::string id, parent, device;
    Mount m;
    std::string source;
    if (!(left >> id >> parent >> device >> m.root >> m.point)) continue;
    if (!(right >> m.fstype >> source)) continue;
    right >> m.options;
    if (m.fstype == "cgroup" || m.fstype == "cgroup2") out.push_back(std::move(m));
  }
  return out;
}

bool has_option(const std::string& options, const std::string& name) {
  std::istringstream in(options);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == name) return true;
  }
  return false;
}

// The directory of cgroup `path` under mount `m`, or nullopt when the mount does not show it.
std::optional<std::string> group_dir(const std::string& root, const Mount& m,
                                     const std::string& path) {
  std::string rel = path;
  if (m.root != "/") {
    // Under the mount's root only at a '/' boundary: root /jobs does not show /jobsX/task.
    if (path.rfind(m.root, 0) != 0 || (path.size() > m.root.size() && path[m.root.size()] != '/'))
      return std::nullopt;
    rel = path.substr(m.root.size());
  }
  if (rel == "/") rel.clear();
  return root + m.point + rel;
}

}  // namespace

std::optional<std::string> read_limit_file(const std::string& path) {
  try {
    return read_file_if_exists(path, kMaxProcFile, path);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<int64_t> positive_number(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v <= 0) return std::nullopt;
  return v;
}

std::vector<CgroupDir> cgroup_dirs(const std::string& root, const std::string& v1_controller) {
  std::vector<CgroupDir> out;
  const std::optional<std::string> groups = read_limit_file(root + "/proc/self/cgroup");
  const std::optional<std::string> mountinfo = read_limit_file(root + "/proc/self/mountinfo");
  if (!groups || !mountinfo) return out;
  const std::vector<Mount> mounts = cgroup_mounts(*mountinfo);
  std::istringstream in(*groups);
  std::string line;
  while (std::getline(in, line)) {
    // "0::/path" (v2), "4:memory:/path" (v1; controllers comma-separated).
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = line.substr(0, a) == "0" && controllers.empty();
    if (!v2 && !has_option(controllers, v1_controller)) continue;
    for (const Mount& m : mounts) {
      if (v2 ? m.fstype != "cgroup2"
             : m.fstype != "cgroup" || !has_option(m.options, v1_controller))
        continue;
      const std::optional<std::string> dir = group_dir(root, m, path);
      if (!dir) continue;
      if (v2) {
        const std::string top = root + m.point;
        for (std::string d = *dir; d.size() >= top.size(); d = d.substr(0, d.rfind('/'))) {
          out.push_back({d, true});
          if (d.size() == top.size()) break;
        }
      } else {
        out.push_back({*dir, false});
      }
      break;
    }
  }
  return out;
}

}  // namespace keel::files
