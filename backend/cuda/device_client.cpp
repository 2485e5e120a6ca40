#include "backend/cuda/device_client.h"

#include <fmt/format.h>

#include <future>

#include "backend/cuda/device_executable.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/libraries.h"
#include "backend/cuda/nvrtc.h"
#include "ir/error.h"

namespace keel::cuda {
namespace {

class DeviceClientImpl : public DeviceClient {
 public:
  DeviceClientImpl(std::shared_ptr<Gpu> gpu, DeviceClientOptions options)
      : options_(std::move(options)),
        state_(std::make_shared<DeviceState>(std::move(gpu), backend::Device{0, "cuda", false})) {}

  std::string platform() const override { return "cuda"; }
  std::vector<backend::Device> devices() const override { return {state_->device}; }
  std::map<std::string, std::string> bundle_fields() const override {
    return cuda::bundle_fields(options_.toolkit_dir, options_.arch);
  }
  backend::Toolchain toolchain(const backend::CompileOptions&) const override {
    return {"nvrtc", Nvrtc::load(options_.toolkit_dir).version(), Nvrtc::options()};
  }

  std::unique_ptr<backend::Executable> compile(const Graph& graph,
                                               const backend::CompileOptions& options) override {
    CudaProgram program = generate_program(graph, options, options_.arch);
    if (!state_->gpu->loads_source()) {
      return load_compiled(
          compile_generated(std::move(program), options_.toolkit_dir, options_.arch));
    }
    // The emulated GPU builds the source for the host while NVRTC compiles it here (still run:
    // its report refuses kernels that spill).
    std::future<CompiledProgram> cubin = std::async(std::launch::async, [&] {
      return compile_generated(program, options_.toolkit_dir, options_.arch);
    });
    std::unique_ptr<backend::Executable> exe;
    try {
      exe = load_compiled(CompiledProgram{program, options_.arch, "", {}});
    } catch (...) {
      cubin.wait();
      throw;
    }
    CompiledProgram compiled = cubin.get();
    auto& loaded = dynamic_cast<LoadedExecutable&>(*exe);
    loaded.attach_cubin(std::move(compiled.cubin), std::move(compiled.kernels));
    return exe;
  }

  std::unique_ptr<backend::Executable> load(std::string_view bytes) override {
    CompiledProgram compiled = deserialize_program(bytes);
    if (compiled.arch != options_.arch) {
      throw InputError(fmt::format(
          "[backend.cuda] load: the executable was compiled for {}, and this device is {} "
          "(cuda.arch); recompile the program",
          compiled.arch, options_.arch));
    }
    return load_compiled(std::move(compiled));
  }

  std::unique_ptr<backend::Executable> load_compiled(CompiledProgram compiled) override {
    return std::make_unique<LoadedExecutable>(state_, std::move(compiled));
  }

  Buffer to_device(const Array& host, const backend::Device& device) override {
    require_device(device);
    auto memory = std::make_shared<GpuMemory>(
        state_, host.nbytes(),
        fmt::format("a {} buffer from the host", TensorType{host.dtype(), host.shape()}.str()));
    Event ready = memory->copy_from_host(host);
    return Buffer(host.dtype(), host.shape(), std::move(memory), std::move(ready));
  }

  Buffer allocate(DType dtype, const Shape& shape, const backend::Device& device,
                  bool zeroed) override {
    require_device(device);
    const TensorType type{dtype, shape};
    auto memory = std::make_shared<GpuMemory>(state_, type.bytes(),
                                              fmt::format("a new {} buffer", type.str()));
    Event ready;
    if (zeroed) {
      std::lock_guard lock(state_->stream);
      if (type.bytes() > 0) state_->gpu->zero(memory->pointer(), type.bytes());
      ready = state_->completions.after(state_->gpu->mark());
    }
    return Buffer(dtype, shape, std::move(memory), std::move(ready));
  }

  backend::MemoryStats memory_stats(const backend::Device& device) const override {
    require_device(device);
    return state_->allocator.stats();
  }

  Event after_dispatched(const backend::Device& device) const override {
    require_device(device);
    std::lock_guard lock(state_->stream);
    return state_->completions.after(state_->gpu->mark());
  }

  DeviceClientCounters device_counters() const override {
    return {state_->host_reads.load(),
            state_->graph_captures.load(),
            state_->graph_updates.load(),
            state_->graph_replays.load(),
            state_->allocator.driver_allocations(),
            state_->allocator.cached_bytes(),
            state_->product_plans.load()};
  }
  std::map<std::string, int64_t> counters() const override {
    const DeviceClientCounters c = device_counters();
    return {{"host_reads", c.host_reads},
            {"graph_captures", c.graph_captures},
            {"graph_updates", c.graph_updates},
            {"graph_replays", c.graph_replays},
            {"driver_allocations", c.driver_allocations}};
  }

 private:
  void require_device(const backend::Device& device) const {
    if (device.kind != "cuda" || device.id != 0) {
      throw Error(fmt::format("[backend.cuda] there is no device {}; this client has {} ({})",
                              device.str(), state_->device.str(), state_->gpu->info().name));
    }
  }

  DeviceClientOptions options_;
  std::shared_ptr<DeviceState> state_;
};

}  // namespace

std::shared_ptr<DeviceClient> make_device_client(std::shared_ptr<Gpu> gpu,
                                                 DeviceClientOptions options) {
  return std::make_shared<DeviceClientImpl>(std::move(gpu), std::move(options));
}

}  // namespace keel::cuda
