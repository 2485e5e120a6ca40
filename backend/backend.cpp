// What the backends share: the compile-option fingerprint for cache keys and host memory
// statistics (both CPU backends run in host memory).
#include <fmt/format.h>

#include <sstream>
#include <string>

#include "backend/backend.h"
#include "backend/host_memory.h"
#include "files/memory_limit.h"
#include "files/read.h"

namespace keel::backend {

// The backend's settings, the pass list and the matmul precision; not work_dir, which only says
// where files go.
std::string CompileOptions::fingerprint() const {
  return fmt::format("{}{};matmul_precision={}",
                     backend_settings ? backend_settings->fingerprint() + ";" : "",
                     passes.fingerprint(), matmul_precision);
}

namespace {

// The value in kB of `key` in a /proc file of "Key:   123 kB" lines, in bytes; 0 if absent.
int64_t proc_kb(const char* path, std::string_view key) {
  std::istringstream f(files::read_file_if_exists(path, 1 << 20, path).value_or(""));
  std::string line;
  while (std::getline(f, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':') {
      return std::stoll(line.substr(key.size() + 1)) * 1024;
    }
  }
  return 0;
}

}  // namespace

MemoryStats host_memory_stats() {
  MemoryStats s;
  s.bytes_in_use = proc_kb("/proc/self/status", "VmRSS");
  s.peak_bytes_in_use = proc_kb("/proc/self/status", "VmHWM");
  s.bytes_limit = files::memory_limit().bytes;  // a cgroup's cap where lower than MemTotal
  return s;
}

}  // namespace keel::backend
