#include "train/process_clock.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace keel::train {

double seconds_since_process_start() {
  // Field 22 of /proc/self/stat is the start time in clock ticks after boot; /proc/uptime is
  // seconds since boot.
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  double start_ticks = std::stod(field);
  double uptime = 0;
  std::ifstream("/proc/uptime") >> uptime;
  return uptime - start_ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace keel::train
