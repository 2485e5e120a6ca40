#pragma once
// What ptxas reports per kernel (NVRTC's --ptxas-options=-v): registers, spills, stack and
// shared memory; a kernel that spills registers to local memory is refused by the tests.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace keel::cuda {

struct KernelResources {
  std::string name;  // the entry function
  int registers = 0;
  int64_t stack_bytes = 0, spill_store_bytes = 0, spill_load_bytes = 0;
  int64_t shared_bytes = 0;  // static shared memory
  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
};

// Every entry function of a ptxas -v log, in the order ptxas compiled them; a log with none
// gives none. Throws keel::Error "[backend.cuda] ..." for an entry whose report is incomplete.
std::vector<KernelResources> parse_ptxas_report(std::string_view log);

}  // namespace keel::cuda
