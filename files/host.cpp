#include "files/host.h"

#include <unistd.h>

#include <sstream>

#include "files/read.h"

namespace keel::files {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

int64_t physical_memory_bytes() {
  std::istringstream in(
      read_file_if_exists("/proc/meminfo", 1 << 20, "/proc/meminfo").value_or(""));
  std::string key;
  int64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

}  // namespace keel::files
