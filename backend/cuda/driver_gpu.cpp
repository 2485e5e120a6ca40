// The Gpu of a real device: the CUDA driver (libcuda.so.1) and cuBLASLt, both opened with
// dlopen. One primary context, one non-blocking stream, events as marks, graphs captured
// thread-locally; built here against the toolkit's headers, run only where a GPU is.
#include <cublasLt.h>
#include <cuda.h>
#include <fmt/format.h>

#include <mutex>
#include <vector>

#include "backend/cuda/blas_product.h"
#include "backend/cuda/gpu.h"
#include "backend/cuda/shared_library.h"
#include "ir/error.h"

namespace keel::cuda {
namespace {

// The versioned name a cuda.h macro maps an entry point to (cuMemAlloc_v2).
#define KEEL_CU_NAME(f) KEEL_CU_STR(f)
#define KEEL_CU_STR(f) #f
#define KEEL_FN(lib, f) decltype(&f) f##_ = lib.function<decltype(&f)>(KEEL_CU_NAME(f))

struct DriverApi {
  explicit DriverApi(const SharedLibrary& lib) : lib(lib) {}
  const SharedLibrary& lib;
  KEEL_FN(lib, cuInit);
  KEEL_FN(lib, cuDeviceGet);
  KEEL_FN(lib, cuDevicePrimaryCtxRetain);
  KEEL_FN(lib, cuCtxSetCurrent);
  KEEL_FN(lib, cuStreamCreate);
  KEEL_FN(lib, cuStreamSynchronize);
  KEEL_FN(lib, cuStreamDestroy);
  KEEL_FN(lib, cuDevicePrimaryCtxRelease);
  KEEL_FN(lib, cuMemAlloc);
  KEEL_FN(lib, cuMemFree);
  KEEL_FN(lib, cuMemHostAlloc);
  KEEL_FN(lib, cuMemFreeHost);
  KEEL_FN(lib, cuMemcpyHtoDAsync);
  KEEL_FN(lib, cuMemcpyDtoHAsync);
  KEEL_FN(lib, cuMemcpyDtoDAsync);
  KEEL_FN(lib, cuMemsetD8Async);
  KEEL_FN(lib, cuEventCreate);
  KEEL_FN(lib, cuEventRecord);
  KEEL_FN(lib, cuEventQuery);
  KEEL_FN(lib, cuEventSynchronize);
  KEEL_FN(lib, cuEventDestroy);
  KEEL_FN(lib, cuModuleLoadData);
  KEEL_FN(lib, cuModuleGetFunction);
  KEEL_FN(lib, cuModuleUnload);
  KEEL_FN(lib, cuLaunchKernel);
  KEEL_FN(lib, cuStreamBeginCapture);
  KEEL_FN(lib, cuStreamEndCapture);
  KEEL_FN(lib, cuGraphInstantiate);
  KEEL_FN(lib, cuGraphExecUpdate);
  KEEL_FN(lib, cuGraphDestroy);
  KEEL_FN(lib, cuGraphLaunch);
  KEEL_FN(lib, cuGraphExecDestroy);
  KEEL_FN(lib, cuGetErrorString);
};

struct LtApi {
  explicit LtApi(const SharedLibrary& lib) : lib(lib) {}
  const SharedLibrary& lib;
  KEEL_FN(lib, cublasLtCreate);
  KEEL_FN(lib, cublasLtDestroy);
  KEEL_FN(lib, cublasLtMatmulDescCreate);
  KEEL_FN(lib, cublasLtMatmulDescSetAttribute);
  KEEL_FN(lib, cublasLtMatmulDescDestroy);
  KEEL_FN(lib, cublasLtMatrixLayoutCreate);
  KEEL_FN(lib, cublasLtMatrixLayoutSetAttribute);
  KEEL_FN(lib, cublasLtMatrixLayoutDestroy);
  KEEL_FN(lib, cublasLtMatmulPreferenceCreate);
  KEEL_FN(lib, cublasLtMatmulPreferenceSetAttribute);
  KEEL_FN(lib, cublasLtMatmulPreferenceDestroy);
  KEEL_FN(lib, cublasLtMatmulAlgoGetHeuristic);
  KEEL_FN(lib, cublasLtMatmul);
};

constexpr uint64_t kWorkspaceBytes = uint64_t{32} << 20;  // cuBLASLt's, one per stream

cudaDataType_t blas_type(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// cuBLASLt's epilogue for a bias and an activation (none: the default, with neither).
cublasLtEpilogue_t epilogue_of(const BlasProduct& p) {
  const bool bias = p.addend == GemmCall::Addend::row_vector;
  switch (p.activation) {
    case GemmCall::Activation::gelu:
      if (p.aux) return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case GemmCall::Activation::gelu_gradient:
      return CUBLASLT_EPILOGUE_DGELU;
    case GemmCall::Activation::none:
      break;
  }
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// A product's descriptors and the algorithm cuBLASLt's heuristic chose for them.
struct LtPlan {
  BlasProduct product;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t x = nullptr, y = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

class MarkOnStream : public StreamMark {
 public:
  MarkOnStream(std::shared_ptr<const DriverApi> api, CUcontext ctx, CUevent event)
      : api_(std::move(api)), ctx_(ctx), event_(event) {}
  ~MarkOnStream() override {
    api_->cuCtxSetCurrent_(ctx_);
    api_->cuEventDestroy_(event_);
  }
  bool reached() const override {
    api_->cuCtxSetCurrent_(ctx_);
    const CUresult r = api_->cuEventQuery_(event_);
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r);
    return true;
  }
  void wait() const override {
    api_->cuCtxSetCurrent_(ctx_);
    check(api_->cuEventSynchronize_(event_));
  }

 private:
  void check(CUresult r) const {
    if (r == CUDA_SUCCESS) return;
    const char* text = nullptr;
    api_->cuGetErrorString_(r, &text);
    throw Error(fmt::format("[backend.cuda] the device failed running queued work: {} ({})",
                            text ? text : "unknown CUDA error", static_cast<int>(r)));
  }
  std::shared_ptr<const DriverApi> api_;
  CUcontext ctx_;
  CUevent event_;
};

class DriverGpu : public Gpu {
 public:
  DriverGpu(int ordinal, const std::string& toolkit_dir)
      : driver_lib_({"libcuda.so.1"}),
        lt_lib_({toolkit_dir + "/lib64/libcublasLt.so.13", "libcublasLt.so.13"}) {
    if (driver_lib_.empty()) {
      throw Error("[backend.cuda] the CUDA driver (libcuda.so.1) is not installed: " +
                  driver_lib_.error());
    }
    if (lt_lib_.empty()) {
      throw Error(fmt::format(
          "[backend.cuda] cuBLASLt could not be loaded: {}; install the CUDA 13 toolkit or set "
          "cuda.toolkit to its folder",
          lt_lib_.error()));
    }
    api_ = std::make_shared<DriverApi>(driver_lib_);
    lt_ = std::make_unique<LtApi>(lt_lib_);
    const DriverReport& report = driver_report();
    if (!report.alive || ordinal >= static_cast<int>(report.devices.size())) {
      throw Error(fmt::format("[backend.cuda] no CUDA device {} here: {}", ordinal,
                              report.alive ? "the driver sees fewer" : report.error));
    }
    info_ = report.devices[static_cast<size_t>(ordinal)];
    check(api_->cuInit_(0), "cuInit");
    check(api_->cuDeviceGet_(&device_, ordinal), "cuDeviceGet");
    check(api_->cuDevicePrimaryCtxRetain_(&ctx_, device_), "cuDevicePrimaryCtxRetain");
    enter();
    check(api_->cuStreamCreate_(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(api_->cuMemAlloc_(&workspace_, kWorkspaceBytes), "cuMemAlloc (cuBLASLt's workspace)");
    check_lt(lt_->cublasLtCreate_(&lt_handle_), "cublasLtCreate");
  }

  ~DriverGpu() override {
    enter();
    api_->cuStreamSynchronize_(stream_);
    lt_->cublasLtDestroy_(lt_handle_);
    api_->cuMemFree_(workspace_);
    api_->cuStreamDestroy_(stream_);
    api_->cuDevicePrimaryCtxRelease_(device_);
  }

  const DeviceInfo& info() const override { return info_; }

  DevicePointer allocate(int64_t bytes) override {
    enter();
    CUdeviceptr p = 0;
    const CUresult r = api_->cuMemAlloc_(&p, static_cast<size_t>(bytes));
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return 0;
    check(r, "cuMemAlloc");
    return p;
  }
  void release(DevicePointer p) noexcept override {
    enter();
    api_->cuMemFree_(p);  // a failed device's memory is gone with it: nothing to do on error
  }
  void* allocate_host(int64_t bytes) override {
    enter();
    void* p = nullptr;
    check(api_->cuMemHostAlloc_(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)), 0),
          "cuMemHostAlloc");
    return p;
  }
  void release_host(void* p) override {
    enter();
    check(api_->cuMemFreeHost_(p), "cuMemFreeHost");
  }

  void copy_to_device(DevicePointer to, const void* host, int64_t bytes) override {
    enter();
    check(api_->cuMemcpyHtoDAsync_(to, host, static_cast<size_t>(bytes), stream_),
          "cuMemcpyHtoDAsync");
  }
  void copy_to_host(void* host, DevicePointer from, int64_t bytes) override {
    enter();
    check(api_->cuMemcpyDtoHAsync_(host, from, static_cast<size_t>(bytes), stream_),
          "cuMemcpyDtoHAsync");
  }
  void copy_on_device(DevicePointer to, DevicePointer from, int64_t bytes) override {
    enter();
    check(api_->cuMemcpyDtoDAsync_(to, from, static_cast<size_t>(bytes), stream_),
          "cuMemcpyDtoDAsync");
  }
  void zero(DevicePointer p, int64_t bytes) override {
    enter();
    check(api_->cuMemsetD8Async_(p, 0, static_cast<size_t>(bytes), stream_), "cuMemsetD8Async");
  }
  void synchronize() override {
    enter();
    check(api_->cuStreamSynchronize_(stream_), "cuStreamSynchronize");
  }
  std::shared_ptr<StreamMark> mark() override {
    enter();
    CUevent e = nullptr;
    check(api_->cuEventCreate_(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    check(api_->cuEventRecord_(e, stream_), "cuEventRecord");
    return std::make_shared<MarkOnStream>(api_, ctx_, e);
  }

  void* load_module(const CompiledProgram& compiled) override {
    enter();
    CUmodule module = nullptr;
    const CUresult r = api_->cuModuleLoadData_(&module, compiled.cubin.data());
    if (r != CUDA_SUCCESS) {
      throw Error(fmt::format(
          "[backend.cuda] the driver refused the cubin of {} (compiled for {}; this device is "
          "{}): {}; recompile the program, or update the driver",
          compiled.program.graph_name, compiled.arch, info_.arch(), text(r)));
    }
    return module;
  }
  KernelHandle kernel(void* module, const std::string& name) override {
    enter();
    CUfunction f = nullptr;
    check(api_->cuModuleGetFunction_(&f, static_cast<CUmodule>(module), name.c_str()),
          "cuModuleGetFunction " + name);
    return {f};
  }
  void unload_module(void* module) override {
    enter();
    api_->cuModuleUnload_(static_cast<CUmodule>(module));
  }

  void launch(KernelHandle kernel, const Launch& l, std::span<const DevicePointer> args) override {
    if (l.grid < 1 || l.grid > 0x7fffffff) {
      throw Error(fmt::format("[backend.cuda] internal: kernel {} launched with {} blocks",
                              l.kernel, l.grid));
    }
    enter();
    std::vector<CUdeviceptr> values(args.begin(), args.end());
    std::vector<void*> params;
    for (CUdeviceptr& v : values) params.push_back(&v);
    check(api_->cuLaunchKernel_(static_cast<CUfunction>(kernel.function),
                                static_cast<unsigned>(l.grid), 1, 1, static_cast<unsigned>(l.block),
                                1, 1, 0, stream_, params.data(), nullptr),
          "cuLaunchKernel " + l.kernel + " (" + l.what + ")");
  }

  GemmHandle plan_gemm(const GemmCall& call, const std::array<int, 4>& alignment) override {
    enter();
    auto plan = std::make_unique<LtPlan>();
    plan->product = blas_product(call);
    const BlasProduct& p = plan->product;
    if (p.empty() || p.zero_fill()) return {plan.release()};  // no cuBLASLt call
    check_lt(lt_->cublasLtMatmulDescCreate_(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
             "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = p.x.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p.y.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(lt_->cublasLtMatmulDescSetAttribute_(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                  sizeof ta),
             "the product's transposes");
    check_lt(lt_->cublasLtMatmulDescSetAttribute_(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                  sizeof tb),
             "the product's transposes");
    const bool bias = p.addend == GemmCall::Addend::row_vector;
    if (bias || p.activation != GemmCall::Activation::none) {
      const cublasLtEpilogue_t epilogue = epilogue_of(p);
      check_lt(lt_->cublasLtMatmulDescSetAttribute_(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                    &epilogue, sizeof epilogue),
               "the product's epilogue");
    }
    if (p.aux) {
      // The GELU input matrix, laid out as D; set before the heuristic runs, as for the bias.
      const int64_t ld = p.ldc;
      const void* placeholder = reinterpret_cast<const void*>(workspace_);
      check_lt(lt_->cublasLtMatmulDescSetAttribute_(
                   plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld),
               "the product's GELU input leading dimension");
      check_lt(lt_->cublasLtMatmulDescSetAttribute_(plan->desc,
                                                    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &placeholder, sizeof placeholder),
               "the product's GELU input");
    }
    if (bias) {
      const cudaDataType_t bias_type = blas_type(p.result);
      check_lt(lt_->cublasLtMatmulDescSetAttribute_(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_type, sizeof bias_type),
               "the product's bias type");
      // Set before the heuristic runs, as PyTorch does; each call sets the real one.
      const void* placeholder = reinterpret_cast<const void*>(workspace_);
      check_lt(lt_->cublasLtMatmulDescSetAttribute_(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &placeholder, sizeof placeholder),
               "the product's bias");
    }
    plan->x = layout(blas_type(p.operand), p.x.rows, p.x.cols, p.x.ld, p.batch, p.x.batch_stride);
    plan->y = layout(blas_type(p.operand), p.y.rows, p.y.cols, p.y.ld, p.batch, p.y.batch_stride);
    plan->c = layout(blas_type(p.result), p.m, p.n, p.ldc, p.batch, p.m * p.n);
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(lt_->cublasLtMatmulPreferenceCreate_(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t workspace = kWorkspaceBytes;
    lt_->cublasLtMatmulPreferenceSetAttribute_(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace, sizeof workspace);
    // Views start anywhere in their buffers: the algorithm must take the operands' alignment
    // (cuBLASLt's A is keel's b, its B keel's a; the default assumes 256 bytes).
    const uint32_t align_a = static_cast<uint32_t>(alignment[1]);
    const uint32_t align_b = static_cast<uint32_t>(alignment[0]);
    const uint32_t align_d = static_cast<uint32_t>(alignment[2]);
    // C is the matrix addend, or d itself (beta = 0).
    const uint32_t align_c =
        static_cast<uint32_t>(p.addend == GemmCall::Addend::matrix ? alignment[3] : alignment[2]);
    for (const auto& [attribute, value] :
         {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d}}) {
      lt_->cublasLtMatmulPreferenceSetAttribute_(pref, attribute, value, sizeof(uint32_t));
    }
    cublasLtMatmulHeuristicResult_t found{};
    int count = 0;
    const cublasStatus_t s = lt_->cublasLtMatmulAlgoGetHeuristic_(
        lt_handle_, plan->desc, plan->x, plan->y, plan->c, plan->c, pref, 1, &found, &count);
    lt_->cublasLtMatmulPreferenceDestroy_(pref);
    if (s != CUBLAS_STATUS_SUCCESS || count == 0) {
      GemmHandle h{plan.release()};
      release_gemm(h);
      throw Error(fmt::format(
          "[backend.cuda] cuBLASLt has no algorithm for a {} x {} x {} product of {} (batch {}{}); "
          "status {}",
          call.m, call.n, call.k, dtype_name(call.operand), call.batch,
          call.activation != GemmCall::Activation::none
              ? ", with a GELU epilogue: set cuda.gelu_epilogues = false to compute GELU in a "
                "kernel"
          : call.addend == GemmCall::Addend::none
              ? ""
              : ", plus an addend: set cuda.product_addends = false to add it in a kernel",
          static_cast<int>(s)));
    }
    plan->algo = found.algo;  // chosen once: every run of the program takes the same path
    return {plan.release()};
  }
  void release_gemm(GemmHandle h) override {
    auto* plan = static_cast<LtPlan*>(h.plan);
    if (plan->desc) lt_->cublasLtMatmulDescDestroy_(plan->desc);
    for (cublasLtMatrixLayout_t l : {plan->x, plan->y, plan->c}) {
      if (l) lt_->cublasLtMatrixLayoutDestroy_(l);
    }
    delete plan;
  }
  void gemm(GemmHandle h, DevicePointer a, DevicePointer b, DevicePointer c, DevicePointer addend,
            DevicePointer aux) override {
    auto* plan = static_cast<LtPlan*>(h.plan);
    const BlasProduct& p = plan->product;
    const auto esize = static_cast<DevicePointer>(dtype_size(p.operand));
    const bool matrix = p.addend == GemmCall::Addend::matrix;
    const float alpha = 1.0f, beta = matrix ? 1.0f : 0.0f;
    enter();
    if (p.addend == GemmCall::Addend::row_vector) {  // read when the call is queued (or captured)
      const void* bias = reinterpret_cast<const void*>(addend);
      check_lt(lt_->cublasLtMatmulDescSetAttribute_(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof bias),
               "the product's bias");
    }
    if (p.aux) {
      const void* at = reinterpret_cast<const void*>(aux);
      check_lt(lt_->cublasLtMatmulDescSetAttribute_(
                   plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &at, sizeof at),
               "the product's GELU input");
    }
    check_lt(lt_->cublasLtMatmul_(lt_handle_, plan->desc, &alpha,
                                  reinterpret_cast<const void*>(b + esize * p.x.first), plan->x,
                                  reinterpret_cast<const void*>(a + esize * p.y.first), plan->y,
                                  &beta, reinterpret_cast<const void*>(matrix ? addend : c),
                                  plan->c, reinterpret_cast<void*>(c), plan->c, &plan->algo,
                                  reinterpret_cast<void*>(workspace_), kWorkspaceBytes, stream_),
             "cublasLtMatmul");
  }

  void begin_capture() override {
    enter();
    check(api_->cuStreamBeginCapture_(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
          "cuStreamBeginCapture");
  }
  void abort_capture() noexcept override {
    enter();
    CUgraph graph = nullptr;
    if (api_->cuStreamEndCapture_(stream_, &graph) == CUDA_SUCCESS && graph) {
      api_->cuGraphDestroy_(graph);
    }
  }
  bool end_capture(GraphHandle& into) override {
    enter();
    CUgraph graph = nullptr;
    check(api_->cuStreamEndCapture_(stream_, &graph), "cuStreamEndCapture");
    if (into.graph) {
      CUgraphExecUpdateResultInfo info{};
      const CUresult r =
          api_->cuGraphExecUpdate_(static_cast<CUgraphExec>(into.graph), graph, &info);
      if (r == CUDA_SUCCESS) {
        api_->cuGraphDestroy_(graph);
        return true;
      }
      api_->cuGraphExecDestroy_(static_cast<CUgraphExec>(into.graph));  // a new graph instead
      into.graph = nullptr;
    }
    CUgraphExec exec = nullptr;
    const CUresult r = api_->cuGraphInstantiate_(&exec, graph, 0);
    api_->cuGraphDestroy_(graph);
    check(r, "cuGraphInstantiate");
    into.graph = exec;
    return false;
  }
  void replay(GraphHandle graph) override {
    enter();
    check(api_->cuGraphLaunch_(static_cast<CUgraphExec>(graph.graph), stream_), "cuGraphLaunch");
  }
  void release_graph(GraphHandle graph) override {
    enter();
    api_->cuGraphExecDestroy_(static_cast<CUgraphExec>(graph.graph));
  }

 private:
  void enter() const { api_->cuCtxSetCurrent_(ctx_); }
  std::string text(CUresult r) const {
    const char* t = nullptr;
    api_->cuGetErrorString_(r, &t);
    return fmt::format("{} ({})", t ? t : "unknown CUDA error", static_cast<int>(r));
  }
  void check(CUresult r, const std::string& what) const {
    if (r != CUDA_SUCCESS) {
      throw Error(fmt::format("[backend.cuda] {} failed on {}: {}", what, info_.name, text(r)));
    }
  }
  static void check_lt(cublasStatus_t s, const std::string& what) {
    if (s != CUBLAS_STATUS_SUCCESS) {
      throw Error(
          fmt::format("[backend.cuda] cuBLASLt: {} failed (status {})", what, static_cast<int>(s)));
    }
  }
  cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                int64_t batch, int64_t stride) const {
    cublasLtMatrixLayout_t l = nullptr;
    check_lt(lt_->cublasLtMatrixLayoutCreate_(&l, type, static_cast<uint64_t>(rows),
                                              static_cast<uint64_t>(cols), ld),
             "cublasLtMatrixLayoutCreate");
    if (batch > 1) {
      const auto count = static_cast<int32_t>(batch);
      lt_->cublasLtMatrixLayoutSetAttribute_(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                             sizeof count);
      lt_->cublasLtMatrixLayoutSetAttribute_(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &stride, sizeof stride);
    }
    return l;
  }

  SharedLibrary driver_lib_, lt_lib_;
  std::shared_ptr<DriverApi> api_;
  std::unique_ptr<LtApi> lt_;
  DeviceInfo info_;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUdeviceptr workspace_ = 0;
  cublasLtHandle_t lt_handle_ = nullptr;
};

}  // namespace

std::shared_ptr<Gpu> open_driver_gpu(int ordinal, const std::string& toolkit_dir) {
  return std::make_shared<DriverGpu>(ordinal, toolkit_dir);
}

}  // namespace keel::cuda
