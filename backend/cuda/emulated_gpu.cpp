#include "backend/cuda/emulated_gpu.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/blas_product.h"
#include "ir/error.h"

namespace keel::cuda {
namespace {

class ReachedMark : public StreamMark {
 public:
  bool reached() const override { return true; }
  void wait() const override {}
};

using Work = std::function<void()>;

class EmulatedGpuImpl : public EmulatedGpu {
 public:
  explicit EmulatedGpuImpl(HostShimOptions options) : options_(std::move(options)) {
    info_.name = "keel's emulated GPU (host shim)";
    info_.memory_bytes = options_.memory_bytes;
    info_.major = 9;
    info_.multiprocessors = 1;
  }
  ~EmulatedGpuImpl() override {
    for (const auto& [p, size] : blocks_) std::free(reinterpret_cast<void*>(p));
  }

  const DeviceInfo& info() const override { return info_; }
  EmulatedGpuCounters counters() const override {
    return {launches_.load(), products_.load(), replays_.load(), host_copies_.load()};
  }

  DevicePointer allocate(int64_t bytes) override {
    std::lock_guard lock(mu_);
    if (bytes <= 0 || used_ + bytes > options_.memory_bytes) return 0;
    const auto size = static_cast<size_t>((bytes + 255) / 256 * 256);
    void* p = std::aligned_alloc(256, size);
    if (!p) return 0;
    std::memset(p, 0xff, size);
    used_ += bytes;
    blocks_[reinterpret_cast<DevicePointer>(p)] = bytes;
    return reinterpret_cast<DevicePointer>(p);
  }
  void release(DevicePointer p) noexcept override {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(p);
    if (it == blocks_.end()) return;
    used_ -= it->second;
    blocks_.erase(it);
    std::free(reinterpret_cast<void*>(p));
  }
  void* allocate_host(int64_t bytes) override {
    return std::malloc(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  }
  void release_host(void* p) override { std::free(p); }

  void copy_to_device(DevicePointer to, const void* host, int64_t bytes) override {
    std::vector<char> staged(static_cast<const char*>(host),
                             static_cast<const char*>(host) + bytes);  // host may change
    queue([to, staged = std::move(staged)] {
      std::memcpy(address(to), staged.data(), staged.size());
    });
  }
  void copy_to_host(void* host, DevicePointer from, int64_t bytes) override {
    queue([this, host, from, bytes] {
      ++host_copies_;
      std::memcpy(host, address(from), static_cast<size_t>(bytes));
    });
  }
  void copy_on_device(DevicePointer to, DevicePointer from, int64_t bytes) override {
    queue([to, from, bytes] {
      std::memmove(address(to), address(from), static_cast<size_t>(bytes));
    });
  }
  void zero(DevicePointer p, int64_t bytes) override {
    queue([p, bytes] { std::memset(address(p), 0, static_cast<size_t>(bytes)); });
  }
  std::shared_ptr<StreamMark> mark() override { return std::make_shared<ReachedMark>(); }
  void synchronize() override {}

  bool loads_source() const override { return true; }
  void* load_module(const CompiledProgram& compiled) override {
    return ShimModule::build(compiled.program, options_).release();
  }
  KernelHandle kernel(void* module, const std::string& name) override {
    return {reinterpret_cast<void*>(static_cast<ShimModule*>(module)->entry(name))};
  }
  void unload_module(void* module) override { delete static_cast<ShimModule*>(module); }

  void launch(KernelHandle kernel, const Launch& l, std::span<const DevicePointer> args) override {
    std::vector<void*> pointers;
    for (DevicePointer a : args) pointers.push_back(address(a));
    const auto entry = reinterpret_cast<ShimEntry>(kernel.function);
    queue([this, entry, grid = l.grid, block = l.block, sync = l.synchronizes,
           pointers = std::move(pointers), name = l.kernel, what = l.what] {
      ++launches_;
      const int r = entry(grid, block, sync ? 1 : 0, pointers.data());
      if (r == 1) {
        throw Error(fmt::format(
            "[backend.cuda] kernel {} ({}) deadlocked at a barrier on the host shim: some "
            "threads of a block never reach it",
            name, what));
      }
      if (r != 0) {
        throw Error(fmt::format(
            "[backend.cuda] internal: kernel {} ({}) synchronizes, and its launch says it "
            "does not",
            name, what));
      }
    });
  }
  GemmHandle plan_gemm(const GemmCall& call, const std::array<int, 4>&) override {
    return {new BlasProduct(blas_product(call))};
  }
  void release_gemm(GemmHandle plan) override { delete static_cast<BlasProduct*>(plan.plan); }
  void gemm(GemmHandle plan, DevicePointer a, DevicePointer b, DevicePointer c,
            DevicePointer addend, DevicePointer aux) override {
    const BlasProduct p = *static_cast<const BlasProduct*>(plan.plan);
    if (p.addend == GemmCall::Addend::row_vector && addend % 16 != 0) {
      throw Error(
          "[backend.cuda] internal: a product's bias is not 16-byte aligned, which "
          "cuBLASLt's epilogue needs");
    }
    if (p.aux && (aux % GemmCall::kAuxAlignment != 0 || p.ldc % 8 != 0)) {
      throw Error(
          "[backend.cuda] internal: a product's GELU input matrix is not at its plan's alignment "
          "or its leading dimension is not a multiple of 8, which cuBLASLt's GELU epilogues need");
    }
    queue([this, p, a, b, c, addend, aux] {
      ++products_;
      run_blas_product(p, address(a), address(b), address(c), addend ? address(addend) : nullptr,
                       aux ? address(aux) : nullptr);
    });
  }

  void begin_capture() override {
    std::lock_guard lock(mu_);
    if (recording_) throw Error("[backend.cuda] internal: a capture began inside another");
    recording_ = std::make_unique<std::vector<Work>>();
  }
  void abort_capture() noexcept override {
    std::lock_guard lock(mu_);
    recording_.reset();
  }
  bool end_capture(GraphHandle& into) override {
    std::lock_guard lock(mu_);
    if (!recording_) throw Error("[backend.cuda] internal: a capture ended that never began");
    std::unique_ptr<std::vector<Work>> recorded = std::move(recording_);
    auto* graph = static_cast<std::vector<Work>*>(into.graph);
    if (graph && graph->size() == recorded->size()) {  // CUDA would update it in place
      *graph = std::move(*recorded);
      return true;
    }
    delete graph;
    into.graph = recorded.release();
    return false;
  }
  void replay(GraphHandle graph) override {
    const auto& work = *static_cast<const std::vector<Work>*>(graph.graph);
    queue([this, &work] {
      ++replays_;
      for (const Work& w : work) w();
    });
  }
  void release_graph(GraphHandle graph) override {
    delete static_cast<std::vector<Work>*>(graph.graph);
  }

 private:
  static char* address(DevicePointer p) { return reinterpret_cast<char*>(p); }
  // Records the work while capturing, else runs it now: the stream is never behind.
  void queue(Work w) {
    std::unique_lock lock(mu_);
    if (recording_) {
      recording_->push_back(std::move(w));
      return;
    }
    lock.unlock();
    std::lock_guard running(running_);  // the shim's fibers are its shared object's globals
    w();
  }

  HostShimOptions options_;
  DeviceInfo info_;
  mutable std::recursive_mutex mu_;
  std::recursive_mutex running_;
  std::map<DevicePointer, int64_t> blocks_;
  int64_t used_ = 0;
  std::unique_ptr<std::vector<Work>> recording_;
  std::atomic<int64_t> launches_{0}, products_{0}, replays_{0}, host_copies_{0};
};

}  // namespace

std::shared_ptr<EmulatedGpu> make_emulated_gpu(HostShimOptions options) {
  return std::make_shared<EmulatedGpuImpl>(std::move(options));
}

std::shared_ptr<DeviceClient> make_host_shim_client(HostShimOptions options) {
  DeviceClientOptions client{options.toolkit_dir, options.arch};
  return make_device_client(make_emulated_gpu(std::move(options)), std::move(client));
}

}  // namespace keel::cuda
