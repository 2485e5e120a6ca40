#include "files/cpu_limit.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <sstream>
#include <thread>

#include "files/cgroup.h"

namespace keel::files {
namespace {

std::optional<int> number(std::string_view s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// Whole cores of CPU time: quota / period rounded up (1.5 cores of time keep 2 threads busy).
std::optional<int> quota_cores(std::optional<int64_t> quota, std::optional<int64_t> period) {
  if (!quota || !period) return std::nullopt;
  const int64_t cores = *quota / *period + (*quota % *period != 0);
  return static_cast<int>(std::min<int64_t>(cores, 1 << 20));
}

}  // namespace

int count_cpu_list(const std::string& list) {
  std::string text = list;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  int count = 0;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t dash = item.find('-');
    const std::optional<int> first = number(item.substr(0, dash));
    const std::optional<int> last =
        dash == std::string::npos ? first : number(item.substr(dash + 1));
    if (!first || !last || *last < *first) return 0;
    count += *last - *first + 1;
  }
  return count;
}

CpuLimit cpu_limit(const std::string& root) {
  CpuLimit limit;
  limit.allowed = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (std::optional<std::string> status = read_limit_file(root + "/proc/self/status")) {
    std::istringstream in(*status);
    std::string line;
    const std::string key = "Cpus_allowed_list:";
    while (std::getline(in, line)) {
      if (line.rfind(key, 0) != 0) continue;
      std::string list = line.substr(key.size());
      list.erase(0, list.find_first_not_of(" \t"));
      if (int n = count_cpu_list(list); n > 0) limit.allowed = n;
      break;
    }
  }
  auto consider = [&](std::optional<int> cores, const std::string& file) {
    if (cores && *cores > 0 && (limit.quota == 0 || *cores < limit.quota)) {
      limit.quota = *cores;
      limit.quota_source = file.substr(root.size());
    }
  };
  for (const CgroupDir& dir : cgroup_dirs(root, "cpu")) {
    if (dir.v2) {
      // "max 100000" (no limit) or "150000 100000".
      const std::string file = dir.path + "/cpu.max";
      if (std::optional<std::string> text = read_limit_file(file)) {
        std::istringstream in(*text);
        std::string quota, period;
        in >> quota >> period;
        consider(quota_cores(positive_number(quota), positive_number(period)), file);
      }
    } else {
      const std::string file = dir.path + "/cpu.cfs_quota_us";
      const std::optional<std::string> quota = read_limit_file(file);
      const std::optional<std::string> period = read_limit_file(dir.path + "/cpu.cfs_period_us");
      if (quota && period) {
        consider(quota_cores(positive_number(*quota), positive_number(*period)), file);
      }
    }
  }
  return limit;
}

}  // namespace keel::files
