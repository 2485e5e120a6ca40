// The host shim's client: lower and generate as the CUDA backend, NVRTC for the architecture
// (its report kept, spills refused), then the same source with kHostShimHeader built by the
// system compiler into a shared object whose keel_shim_launch runs one launch of the table.
#include "backend/cuda/host_shim.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>

#include "backend/cuda/codegen.h"
#include "backend/cuda/compiled_program.h"
#include "backend/host_memory.h"
#include "files/process.h"
#include "files/publish.h"
#include "ir/error.h"

namespace keel::cuda {
namespace {

namespace fs = std::filesystem;
constexpr const char* kName = "cuda-shim";

// keel_shim_launch(i, args): launch i of the table with its arguments' addresses; 0, or 1 when a
// block's threads deadlocked at a barrier.
using LaunchFn = int (*)(int index, void* const* args);

std::string launch_entries(const CudaProgram& p) {
  std::string s = "extern \"C\" int keel_shim_launch(int index, void* const* args) {\n";
  s += "  switch (index) {\n";
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& l = p.launches[i];
    if (l.gemm) continue;  // the shim's own product (host_gemm)
    std::string call = l.kernel + "(";
    for (size_t a = 0; a < l.param_types.size(); ++a) {
      call += fmt::format("{}static_cast<{}>(args[{}])", a ? ", " : "", l.param_types[a], a);
    }
    call += ")";
    s += fmt::format("    case {}:\n      return keel_shim::run({}, {}, {}, [&] {{ {}; }});\n", i,
                     l.grid, l.block, l.synchronizes, call);
  }
  return s + "  }\n  return 2;\n}\n";
}

float element(const char* base, DType t, int64_t i) {
  if (t == DType::bf16) {
    uint16_t bits = 0;
    std::memcpy(&bits, base + 2 * i, 2);
    return bf16_to_f32(bits);
  }
  float f = 0;
  std::memcpy(&f, base + 4 * i, 4);
  return f;
}

// The product a GemmCall describes, element by element through its layouts: what cuBLASLt is
// asked to compute, so a wrong description shows against the reference interpreter.
void host_gemm(const GemmCall& c, const char* a, const char* b, char* out) {
  for (int64_t bt = 0; bt < c.batch; ++bt) {
    const int64_t ao = c.a.batch_offsets.at(static_cast<size_t>(bt));
    const int64_t bo = c.b.batch_offsets.at(static_cast<size_t>(bt));
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        float acc = 0.0f;
        for (int64_t p = 0; p < c.k; ++p) {
          acc += element(a, c.operand, ao + i * c.a.row_stride + p * c.a.col_stride) *
                 element(b, c.operand, bo + p * c.b.row_stride + j * c.b.col_stride);
        }
        const int64_t at = (bt * c.m + i) * c.n + j;
        if (c.result == DType::bf16) {
          const uint16_t bits = f32_to_bf16(acc);
          std::memcpy(out + 2 * at, &bits, 2);
        } else {
          std::memcpy(out + 4 * at, &acc, 4);
        }
      }
    }
  }
}

class SharedObject {
 public:
  explicit SharedObject(const std::string& path)
      : handle_(::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    if (!handle_) {
      const char* e = ::dlerror();
      throw Error(fmt::format("[backend.cuda] the host shim's {} does not load: {}", path,
                              e ? e : "unknown dlopen error"));
    }
    launch_ = reinterpret_cast<LaunchFn>(::dlsym(handle_, "keel_shim_launch"));
    if (!launch_) throw Error("[backend.cuda] internal: the host shim has no keel_shim_launch");
  }
  ~SharedObject() { ::dlclose(handle_); }
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  LaunchFn launch() const { return launch_; }

 private:
  void* handle_;
  LaunchFn launch_ = nullptr;
};

class ShimExecutableImpl : public ShimExecutable {
 public:
  ShimExecutableImpl(CudaProgram program, std::vector<KernelResources> kernels,
                     std::unique_ptr<SharedObject> so)
      : program_(std::move(program)), kernels_(std::move(kernels)), so_(std::move(so)) {}

  std::vector<backend::Buffer> execute(std::span<const backend::Buffer> args) override {
    // The shim's fibers and barriers are the shared object's globals: one run at a time.
    std::lock_guard lock(running_);
    if (args.size() != program_.inputs.size()) {
      throw Error(fmt::format("[backend.cuda] {} takes {} inputs, got {}", program_.graph_name,
                              program_.inputs.size(), args.size()));
    }
    std::vector<const Array*> in;
    for (size_t i = 0; i < args.size(); ++i) {
      const Array& a = backend::host_array(args[i], kName);
      if (a.dtype() != program_.inputs[i].dtype || a.shape() != program_.inputs[i].shape) {
        throw Error(fmt::format("[backend.cuda] input {} of {} is {}, expected {}", i,
                                program_.graph_name, TensorType{a.dtype(), a.shape()}.str(),
                                program_.inputs[i].str()));
      }
      in.push_back(&a);
    }
    std::vector<Array> out;
    for (const TensorType& t : program_.outputs)
      out.push_back(Array::uninitialized(t.dtype, t.shape));
    // The arena starts as NaN bytes, so a kernel reading what no kernel wrote shows.
    std::vector<char> arena_bytes(static_cast<size_t>(program_.arena_bytes) + 256, '\xff');
    char* arena =
        arena_bytes.data() + (256 - reinterpret_cast<uintptr_t>(arena_bytes.data()) % 256) % 256;
    auto address = [&](const Slot& s) -> char* {
      switch (s.kind) {
        case Slot::Kind::input:
          return const_cast<char*>(reinterpret_cast<const char*>(in.at(s.index)->data())) +
                 s.byte_offset;
        case Slot::Kind::output:
          return reinterpret_cast<char*>(out.at(s.index).data()) + s.byte_offset;
        case Slot::Kind::arena:
          return arena + s.byte_offset;
      }
      return nullptr;
    };
    for (size_t i = 0; i < program_.launches.size(); ++i) {
      const Launch& l = program_.launches[i];
      std::vector<void*> pointers;
      for (const Slot& s : l.args) pointers.push_back(address(s));
      if (l.gemm) {
        if (!gemm_fits(program_, l)) {
          throw Error(
              fmt::format("[backend.cuda] internal: {} of {} describes a product outside "
                          "its buffers or a layout cuBLASLt cannot take",
                          l.what, program_.graph_name));
        }
        host_gemm(*l.gemm, static_cast<const char*>(pointers.at(0)),
                  static_cast<const char*>(pointers.at(1)), static_cast<char*>(pointers.at(2)));
        continue;
      }
      const int r = so_->launch()(static_cast<int>(i), pointers.data());
      if (r == 1) {
        throw Error(
            fmt::format("[backend.cuda] kernel {} ({}) of {} deadlocked at a barrier on the "
                        "host shim: some threads of a block never reach it",
                        l.kernel, l.what, program_.graph_name));
      }
      if (r != 0) {
        throw Error(
            fmt::format("[backend.cuda] internal: kernel {} ({}) of {} synchronizes, and its "
                        "launch says it does not",
                        l.kernel, l.what, program_.graph_name));
      }
    }
    for (const OutputCopy& c : program_.copies) {
      std::memmove(address(Slot{Slot::Kind::output, c.output, 0}), address(c.from),
                   static_cast<size_t>(c.bytes));
    }
    std::vector<backend::Buffer> buffers;
    for (Array& a : out)
      buffers.push_back(backend::adopt_host_array(std::move(a), backend::host_device()));
    return buffers;
  }
  std::string serialize() const override {
    throw Error("[backend.cuda] the host shim runs the programs it compiled; it serializes none");
  }
  int64_t predicted_peak_bytes() const override { return program_.predicted_peak_bytes; }
  std::string platform() const override { return kName; }
  const CudaProgram& program() const override { return program_; }
  const std::vector<KernelResources>& kernels() const override { return kernels_; }

 private:
  CudaProgram program_;
  std::vector<KernelResources> kernels_;
  std::unique_ptr<SharedObject> so_;
  std::mutex running_;
};

class ShimClient : public backend::Client {
 public:
  static std::unique_ptr<SharedObject> build(const CudaProgram& program,
                                             const HostShimOptions& options);
  explicit ShimClient(HostShimOptions options) : options_(std::move(options)) {}
  std::string platform() const override { return kName; }
  std::vector<backend::Device> devices() const override { return {backend::host_device()}; }

  std::unique_ptr<backend::Executable> compile(const Graph& graph,
                                               const backend::CompileOptions& options) override {
    CudaProgram program = generate_program(graph, options);
    // The system compiler builds the shim in its own process while NVRTC compiles here.
    std::future<std::unique_ptr<SharedObject>> so =
        std::async(std::launch::async, [&program, this] { return build(program, options_); });
    CompiledProgram compiled;
    try {
      compiled = compile_generated(program, options_.toolkit_dir, options_.arch);
    } catch (...) {
      so.wait();
      throw;
    }
    std::unique_ptr<SharedObject> object = so.get();
    return std::make_unique<ShimExecutableImpl>(std::move(compiled.program),
                                                std::move(compiled.kernels), std::move(object));
  }
  std::unique_ptr<backend::Executable> load(std::string_view) override {
    throw Error("[backend.cuda] the host shim loads no serialized programs");
  }
  backend::Buffer to_device(const Array& host, const backend::Device& device) override {
    backend::require_host_device(device, "backend.cuda", "the host shim");
    return backend::adopt_host_array(host, device);
  }
  backend::MemoryStats memory_stats(const backend::Device& device) const override {
    backend::require_host_device(device, "backend.cuda", "the host shim");
    return backend::host_memory_stats();
  }

 private:
  HostShimOptions options_;
};

std::unique_ptr<SharedObject> ShimClient::build(const CudaProgram& program,
                                                const HostShimOptions& options) {
  static std::atomic<uint64_t> counter{0};
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("keel-cuda-shim-{}-{}", ::getpid(), counter++);
  fs::create_directories(dir);
  struct Remove {
    fs::path dir;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove{dir};
  const std::string source = (dir / "program.cpp").string();
  const std::string object = (dir / "program.so").string();
  files::publish_file(source,
                      std::string(kHostShimHeader) + program.source + launch_entries(program));
  // -U_FORTIFY_SOURCE: fibers switch stacks with _longjmp, which fortify's check refuses.
  const files::ProcessResult r =
      files::run_process({options.compiler, "-std=c++17", "-O1", "-fPIC", "-shared", "-w",
                          "-U_FORTIFY_SOURCE", source, "-o", object},
                         options.compile_timeout_s);
  if (r.exit_code != 0 || r.timed_out) {
    throw Error(fmt::format("[backend.cuda] the host shim's build of {} failed{}:\n{}",
                            program.graph_name, r.timed_out ? " (timed out)" : "",
                            r.output.substr(0, 4000)));
  }
  return std::make_unique<SharedObject>(object);  // mapped: the file may go
}

}  // namespace

std::shared_ptr<backend::Client> make_host_shim_client(HostShimOptions options) {
  return std::make_shared<ShimClient>(std::move(options));
}

std::unique_ptr<ShimExecutable> make_shim_executable(CudaProgram program,
                                                     const HostShimOptions& options) {
  std::unique_ptr<SharedObject> so = ShimClient::build(program, options);
  return std::make_unique<ShimExecutableImpl>(std::move(program), std::vector<KernelResources>{},
                                              std::move(so));
}

}  // namespace keel::cuda
