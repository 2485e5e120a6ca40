#pragma once
// A compiled CPU program: the loaded shared object and its signature. Programs run in one
// scratch arena shared by the process, grown to the largest need, so a step split into many
// programs holds one arena, not one per program.
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/loader.h"
#include "backend/cpu/serialize.h"
#include "ir/host_memory.h"

namespace keel::cpu {

class CpuExecutable : public backend::Executable {
 public:
  // Loads `so_bytes` (memfd + dlopen); throws keel::Error when they do not load.
  CpuExecutable(ExecutableHeader info, std::string so_bytes);
  ~CpuExecutable() override;  // waits for its queued runs

  // Checks the inputs against the signature, allocates the outputs and queues keel_run on the
  // device's run queue; the outputs are ready() when it has run, failed with its error if not.
  std::vector<backend::Buffer> execute(std::span<const backend::Buffer> args) override;
  std::string serialize() const override { return serialize_program(info_, so_bytes_); }
  int64_t predicted_peak_bytes() const override { return info_.predicted_peak_bytes; }
  std::string platform() const override { return "cpu"; }

  const ExecutableHeader& info() const { return info_; }

 private:
  static std::shared_ptr<HostBlock> allocate_arena(int64_t bytes);
  void check_inputs(std::span<const backend::Buffer> args) const;
  // Runs keel_run over `in` and `out` in the shared arena; keel::Error when it refuses.
  void run_now(std::span<const void* const> in, std::span<void* const> out);

  ExecutableHeader info_;
  std::string so_bytes_;
  LoadedObject object_;
  std::atomic<int> in_flight_{0};  // runs queued and not yet finished
};

// Bytes of the shared arena now (the largest arena a program has run in; a concurrent call that
// found it busy used its own, freed after the call).
int64_t shared_arena_bytes();

}  // namespace keel::cpu
