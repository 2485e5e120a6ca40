#include "backend/cuda/kernel_resources.h"

#include <fmt/format.h>

#include <regex>

#include "ir/error.h"

namespace keel::cuda {

std::vector<KernelResources> parse_ptxas_report(std::string_view log) {
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  std::vector<KernelResources> out;
  std::vector<bool> complete;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string_view::npos) end = log.size();
    const std::string line(log.substr(start, end - start));
    start = end + 1;
    std::smatch m;
    if (std::regex_search(line, m, entry)) {
      out.push_back({m[1].str()});
      complete.push_back(false);
      continue;
    }
    if (out.empty()) continue;
    KernelResources& k = out.back();
    if (std::regex_search(line, m, frame)) {
      k.stack_bytes = std::stoll(m[1].str());
      k.spill_store_bytes = std::stoll(m[2].str());
      k.spill_load_bytes = std::stoll(m[3].str());
    } else if (std::regex_search(line, m, used)) {
      k.registers = std::stoi(m[1].str());
      complete.back() = true;
      if (std::regex_search(line, m, smem)) k.shared_bytes = std::stoll(m[1].str());
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (!complete[i]) {
      throw Error(fmt::format(
          "[backend.cuda] ptxas reported no registers for kernel '{}'; the log is not ptxas -v's "
          "(NVRTC 13 expected)",
          out[i].name));
    }
  }
  return out;
}

}  // namespace keel::cuda
