// CpuClient: compile = lower -> generate C++ -> system compiler -> load from memory;
// load = check the serialized header -> load from memory. No step needs libkeel's symbols in
// the shared object: everything it calls comes through the kernel table.
#include "backend/cpu/client.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "backend/cpu/abi.h"
#include "backend/cpu/blas.h"
#include "backend/cpu/client_files.h"
#include "backend/cpu/codegen.h"
#include "backend/cpu/compiler.h"
#include "backend/cpu/executable.h"
#include "backend/cpu/host_block_cache.h"
#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/run_queue.h"
#include "backend/cpu/settings.h"
#include "backend/cpu/target.h"
#include "backend/host_memory.h"
#include "files/publish.h"
#include "files/read.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "policy/schema.h"

namespace keel::cpu {
namespace {

constexpr int64_t kMaxSharedObjectBytes = int64_t{1} << 30;

std::vector<TensorType> types_of(const Graph& g, const std::vector<NodeId>& ids) {
  std::vector<TensorType> out;
  for (NodeId id : ids) out.push_back(g.node(id).type);
  return out;
}

// The passes must keep the calling convention: same parameters and outputs, same types.
void check_signature(const Graph& before, const Graph& after) {
  if (types_of(before, before.params()) != types_of(after, after.params()) ||
      types_of(before, before.outputs()) != types_of(after, after.outputs())) {
    throw Error(
        fmt::format("[backend.cpu] internal: lowering changed the signature of '{}'; "
                    "disable passes one by one (passes.disabled) to find which",
                    before.name()));
  }
}

void require_device(const backend::Device& device) {
  backend::require_host_device(device, "cpu", "the CPU client");
}

class CpuClient : public backend::Client {
 public:
  explicit CpuClient(std::shared_ptr<const BlasLibrary> blas) : blas_(std::move(blas)) {}
  std::string platform() const override { return "cpu"; }
  std::map<std::string, std::string> bundle_fields() const override {
    return {{"blas", blas_->config},
            {"blas.library", blas_->name},
            {"onednn", detail::onednn_description()},
            {"openmp", std::to_string(_OPENMP)}};
  }
  backend::Toolchain toolchain(const backend::CompileOptions& options) const override {
    return toolchain_of(settings_of(options));
  }
  std::shared_ptr<const backend::BackendSettings> default_settings() const override {
    return std::make_shared<const Settings>();
  }
  std::vector<backend::Device> devices() const override { return {backend::host_device()}; }

  std::unique_ptr<backend::Executable> compile(const Graph& graph,
                                               const backend::CompileOptions& options) override {
    passes::PassOptions pass_options = options.passes;
    pass_options.bf16_matmul = options.matmul_precision == "bf16";
    passes::Lowered lowered = cpu::lower(graph, pass_options);
    check_signature(graph, lowered.graph);
    lowered.graph.set_name(graph.name());
    return compile_lowered(lowered, options);
  }

  std::unique_ptr<backend::Executable> load(std::string_view bytes) override {
    std::string_view so;
    ExecutableHeader info = deserialize_program(bytes, so);
    return std::make_unique<CpuExecutable>(std::move(info), std::string(so));
  }

  backend::Buffer to_device(const Array& host, const backend::Device& device) override {
    require_device(device);
    return backend::adopt_host_array(host, device);
  }

  // Output memory, from the same recycled blocks as programs' outputs.
  backend::Buffer allocate(DType dtype, const Shape& shape, const backend::Device& device,
                           bool zeroed) override {
    require_device(device);
    return backend::adopt_host_array(cached_array(dtype, shape, zeroed), device);
  }

  backend::MemoryStats memory_stats(const backend::Device& device) const override {
    require_device(device);
    return backend::host_memory_stats();
  }
  void release_cached_memory(const backend::Device& device) override {
    require_device(device);
    release_host_cache();
  }
  Event after_dispatched(const backend::Device& device) const override {
    backend::require_host_device(device, "cpu", "the CPU client");
    return run_queue().after_dispatched();
  }

 private:
  std::shared_ptr<const BlasLibrary> blas_;
};

}  // namespace

std::unique_ptr<backend::Executable> compile_lowered(const passes::Lowered& lowered,
                                                     const backend::CompileOptions& options) {
  const Graph& graph = lowered.graph;
  CodegenOptions codegen;
  if (options.matmul_precision == "bf16") {
    codegen.matmul_precision = KEEL_MATMUL_BF16;
  } else if (options.matmul_precision != "f32") {
    throw Error(fmt::format(
        "[backend.cpu] matmul precision '{}' is not one of f32, bf16 (cpu.matmul_precision)",
        options.matmul_precision));
  }
  const GeneratedSource src = generate_source(lowered, codegen);
  if (options.before_build) options.before_build(src.predicted_peak_bytes);
  WorkDir dir(options.work_dir);
  std::string stem = file_stem(graph.name());
  if (!dir.temporary()) stem = fmt::format("{}-{}", stem, hash_bytes(src.text).hex().substr(0, 12));
  const std::string source = fmt::format("{}/{}.cpp", dir.path(), stem);
  const std::string object = fmt::format("{}/{}.so", dir.path(), stem);
  files::publish_file(source, src.text);
  if (!options.passes.dump_dir.empty()) {
    files::publish_file(fmt::format("{}/{}.cpp", options.passes.dump_dir, file_stem(graph.name())),
                        src.text);
  }
  // A unique name for the compiler's output, so concurrent compiles into one work_dir never
  // write the same file.
  static std::atomic<uint64_t> counter{0};
  const std::string building =
      fmt::format("{}/.{}.{}.{}.so.tmp", dir.path(), stem, ::getpid(), counter++);
  try {
    const Settings& settings = settings_of(options);
    Compiler(settings.compiler, settings.flags, settings.compile_timeout_s)
        .build(source, building, graph.name());
  } catch (const BuildStopped&) {
    std::error_code ec;  // nothing kept: a Ctrl-C during a compile leaves nothing behind
    std::filesystem::remove(building, ec);
    throw;
  } catch (...) {
    dir.keep();
    std::error_code ec;
    std::filesystem::remove(building, ec);
    throw;
  }
  std::string so;
  try {
    so = files::read_file(building, kMaxSharedObjectBytes, "the compiler's output");
  } catch (const files::ReadError& e) {
    throw Error(fmt::format("[backend.cpu] {}", e.what()));  // keel's own file: not bad input
  }
  std::error_code ec;
  std::filesystem::rename(building, object, ec);
  if (ec) std::filesystem::remove(building, ec);
  ExecutableHeader info;
  info.graph_name = graph.name();
  info.inputs = types_of(graph, graph.params());
  info.outputs = types_of(graph, graph.outputs());
  info.aliases = graph.output_aliases();
  info.arena_bytes = src.arena_bytes;
  info.predicted_peak_bytes = src.predicted_peak_bytes;
  return std::make_unique<CpuExecutable>(std::move(info), std::move(so));
}

std::shared_ptr<backend::Client> make_cpu_client(const std::string& blas_library) {
  std::string name = blas_library;
  if (name.empty()) name = std::get<std::string>(policy::find_key("cpu.blas")->fallback);
  return std::make_shared<CpuClient>(load_blas(name));
}

}  // namespace keel::cpu
