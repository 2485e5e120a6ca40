#include "files/process_clock.h"

#include <unistd.h>

#include <sstream>
#include <string>

#include "files/read.h"

namespace keel::files {
namespace {

std::string proc_text(const char* path) {
  return files::read_file_if_exists(path, 1 << 20, path).value_or("");
}

}  // namespace

double seconds_since_process_start() {
  // Field 22 of /proc/self/stat is the start time in clock ticks after boot; /proc/uptime is
  // seconds since boot.
  const std::string text = proc_text("/proc/self/stat");
  size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  double start_ticks = std::stod(field);
  double uptime = 0;
  std::istringstream(proc_text("/proc/uptime")) >> uptime;
  return uptime - start_ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace keel::files
