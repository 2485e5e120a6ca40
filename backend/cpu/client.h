#pragma once
// The compiled CPU backend: lower the graph (passes), write C++ (codegen), build a shared
// object with the system compiler, load it from memory. Devices: {cpu:0}, which is host memory.
#include <memory>
#include <string>

#include "backend/backend.h"
#include "passes/pipeline.h"

namespace keel::cpu {

// Loads the BLAS library (`blas_library`; empty: the cpu.blas default) first; throws
// keel::Error naming it when it cannot be loaded.
std::shared_ptr<backend::Client> make_cpu_client(const std::string& blas_library = "");

// The compile step after lowering: codegen, system compiler, load. Client::compile is
// cpu::lower followed by this; tests and tools use it to build programs from plans of
// their own. options.passes only supplies dump_dir here.
std::unique_ptr<backend::Executable> compile_lowered(const passes::Lowered& lowered,
                                                     const backend::CompileOptions& options);

}  // namespace keel::cpu
