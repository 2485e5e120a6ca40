// The CUDA backend's parts that need no GPU (issue 49): NVRTC compiles for sm_90 in this process
// and ptxas' report is read per kernel; the probe tells installed from alive; a machine without
// a device refuses the backend with one line, and suites skip it. Built where the CUDA toolkit
// is (KEEL_CUDA); what runs on a device is checked by make device-check.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "autodiff/grad.h"
#include "backend/cuda/backend_spec.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/compiled_program.h"
#include "backend/cuda/device_client.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/emulated_gpu.h"
#include "backend/cuda/kernel_resources.h"
#include "backend/cuda/libraries.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/target.h"
#include "ir/error.h"
#include "nn/gpt.h"
#include "policy/resolve.h"
#include "runtime/backends.h"
#include "runtime/probe.h"
#include "tests/backend_cpu_cases.h"
#include "tests/cuda_checks.h"
#include "tests/cuda_small_program.h"
#include "tests/rows_batch.h"
#include "trace/jit.h"
#include "train/step.h"
#include "train/train_state.h"

namespace keel {
namespace {

using cuda_test::expect_matches;
using cuda_test::has;
using cuda_test::with_gradients;

using cpu_test::Ints;

const char* const kToolkit = "/usr/local/cuda";

policy::LaunchPolicy launch(std::vector<std::string> sets) {
  policy::PolicySources s;
  s.sets = std::move(sets);
  s.sets.push_back("compile_cache.mode=off");
  return policy::resolve_policy(s);
}

// ptxas -v as NVRTC 13.0 writes it (two kernels; the second spills and uses shared memory).
TEST(CudaPtxasReport, ReadsEachKernelsRegistersSpillsAndSharedMemory) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k_add' for 'sm_90'\n"
      "ptxas info    : Function properties for k_add\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 11 registers, used 0 barriers\n"
      "ptxas info    : Compile time = 4.062 ms\n"
      "ptxas info    : Compiling entry function 'k_sum' for 'sm_90'\n"
      "ptxas info    : Function properties for k_sum\n"
      "ptxas         .     24 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem\n";
  const auto kernels = cuda::parse_ptxas_report(log);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].name, "k_add");
  EXPECT_EQ(kernels[0].registers, 11);
  EXPECT_FALSE(kernels[0].spills());
  EXPECT_EQ(kernels[0].shared_bytes, 0);
  EXPECT_EQ(kernels[1].name, "k_sum");
  EXPECT_EQ(kernels[1].registers, 255);
  EXPECT_EQ(kernels[1].stack_bytes, 24);
  EXPECT_EQ(kernels[1].spill_store_bytes, 16);
  EXPECT_EQ(kernels[1].spill_load_bytes, 8);
  EXPECT_TRUE(kernels[1].spills());
  EXPECT_EQ(kernels[1].shared_bytes, 1024);
  EXPECT_TRUE(cuda::parse_ptxas_report("").empty());
  // An entry whose report was cut off is an error, not a kernel with 0 registers.
  EXPECT_THROW(
      cuda::parse_ptxas_report("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"),
      Error);
}

// NVRTC turns CUDA C into an sm_90 cubin here, where there is no GPU, and ptxas' report comes
// back per kernel.
TEST(CudaNvrtc, CompilesForHopperWithoutADeviceAndReportsEachKernel) {
  const cuda::Nvrtc& nvrtc = cuda::Nvrtc::load(kToolkit);
  EXPECT_EQ(nvrtc.version().substr(0, 3), "13.");
  const auto archs = nvrtc.architectures();
  EXPECT_NE(std::find(archs.begin(), archs.end(), "sm_90"), archs.end());
  const std::string source = R"(
float twice(float x) { return 2.0f * x; }  // a device function by -default-device
extern "C" __global__ void k_scale(float* out, const float* in, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = twice(in[i]);
}
extern "C" __global__ void k_reverse(float* a) {
  __shared__ float s[256];
  s[threadIdx.x] = a[threadIdx.x];
  __syncthreads();
  a[threadIdx.x] = s[255 - threadIdx.x];
}
)";
  const cuda::Cubin cubin = nvrtc.compile(source, "two_kernels", "sm_90");
  ASSERT_GE(cubin.bytes.size(), 4u);
  EXPECT_EQ(cubin.bytes.substr(0, 4), std::string("\x7f"
                                                  "ELF"));
  ASSERT_EQ(cubin.kernels.size(), 2u) << cubin.log;
  for (const cuda::KernelResources& k : cubin.kernels) {
    EXPECT_GT(k.registers, 0) << k.name;
    EXPECT_FALSE(k.spills()) << k.name;
    EXPECT_EQ(k.shared_bytes, k.name == "k_reverse" ? 1024 : 0) << k.name;
  }
  try {
    nvrtc.compile("extern \"C\" __global__ void k() { undeclared(); }", "broken", "sm_90");
    ADD_FAILURE() << "a kernel that does not compile was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "[backend.cuda] NVRTC could not compile broken for sm_90"))
        << e.what();
    EXPECT_TRUE(has(e.what(), "undeclared")) << e.what();  // the compiler's own message
  }
}

// The libraries are found without a device and name their versions for the bundle.
TEST(CudaLibraries, ReportTheirVersionsWithoutADevice) {
  EXPECT_EQ(cuda::nvrtc_version(kToolkit).text().substr(0, 3), "13.");
  EXPECT_EQ(cuda::cublaslt_version(kToolkit).text().substr(0, 3), "13.");
  EXPECT_EQ(cuda::cudnn_version(kToolkit).text().substr(0, 2), "9.");
  // cuda.toolkit first, then the loader's path (which has it here).
  EXPECT_TRUE(cuda::cudnn_version("/nonexistent").found);
}

// The ops whose conformance case still lowers to a unit without a CUDA kernel; the next kernels
// of issue 49 take them off this list (the test fails when one is here and runs, or is missing).
const std::set<std::string> kWithoutKernel = {"axis_index"};

// On a machine without a GPU the backend is registered, says why it cannot run, refuses a
// client with one line, and the probe tells installed (NVRTC, cuBLASLt, cuDNN) from alive.
TEST(CudaBackend, WithoutADeviceItIsRegisteredAndRefusedWithOneLine) {
  const auto names = registered_backend_names();
  ASSERT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
  const cuda::DriverReport& driver = cuda::driver_report();
  if (driver.alive) GTEST_SKIP() << "a CUDA device is here: " << driver.devices.front().name;
  const backend::BackendSpec& spec = backend::find_backend("cuda");
  ASSERT_TRUE(spec.unavailable_here);
  const policy::LaunchPolicy cuda = launch({"launch.backend=cuda"});
  EXPECT_TRUE(has(spec.unavailable_here(cuda), "no CUDA device")) << spec.unavailable_here(cuda);
  EXPECT_EQ(spec.unavailable_here(launch({"launch.backend=cuda", "cuda.emulate=true"})), "");
  for (const std::string& op : kWithoutKernel)
    EXPECT_TRUE(spec.ops_without_kernels.count(op)) << op;
  try {
    spec.make_client(launch({"launch.backend=cuda"}));
    ADD_FAILURE() << "a client was made without a device";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "[backend.cuda] no CUDA device here")) << e.what();
    EXPECT_TRUE(has(e.what(), "keel probe")) << e.what();
  }
  const runtime::ProbeReport r = runtime::run_probe(launch({"launch.backend=cuda"}));
  auto status = [&](const std::string& name) {
    for (const runtime::ProbeCheck& c : r.checks) {
      if (c.name == name) return c.status;
    }
    ADD_FAILURE() << "no check " << name << " in\n" << r.text();
    return runtime::ProbeStatus::skip;
  };
  EXPECT_EQ(status("cuda.driver"), runtime::ProbeStatus::fail);
  EXPECT_EQ(status("cuda.nvrtc"), runtime::ProbeStatus::pass);
  EXPECT_EQ(status("cuda.cublaslt"), runtime::ProbeStatus::pass);
  EXPECT_EQ(status("cuda.cudnn"), runtime::ProbeStatus::pass);
  EXPECT_EQ(status("cuda.compile_run"), runtime::ProbeStatus::skip);
  EXPECT_FALSE(r.ok()) << "the launch's backend cannot run, so the probe fails";
  // The CPU launch's probe still passes: only the launch's backend can fail it.
  EXPECT_TRUE(runtime::run_probe(launch({})).ok());
}

// cuda.arch: sm_NN, or native (the device's), which needs a device; the bundle names the
// libraries and the architecture, so executables built for another are never loaded.
TEST(CudaBackend, TheArchitectureIsCheckedAndJoinsTheBundle) {
  EXPECT_EQ(cuda::target_arch(launch({"launch.backend=cuda", "cuda.arch=sm_90"})), "sm_90");
  try {
    cuda::target_arch(launch({"cuda.arch=hopper"}));
    ADD_FAILURE() << "cuda.arch = hopper was accepted";
  } catch (const InputError& e) {
    EXPECT_TRUE(
        has(e.what(), "cuda.arch = 'hopper' (from --set cuda.arch=hopper) is not native or sm_NN"))
        << e.what();
  }
  if (!cuda::driver_report().alive) {
    EXPECT_THROW(cuda::target_arch(launch({})), InputError);
  }
  const policy::LaunchPolicy p = launch({"launch.backend=cuda", "cuda.arch=sm_90"});
  const backend::BundlePart part = backend::find_backend("cuda").bundle_part(p, {});
  EXPECT_EQ(part.fields.at("cuda.arch"), "sm_90");
  EXPECT_EQ(part.fields.at("cuda.nvrtc").substr(0, 3), "13.");
  EXPECT_EQ(part.fields.at("cuda.cublaslt").substr(0, 3), "13.");
  EXPECT_EQ(part.fields.at("cuda.cudnn").substr(0, 2), "9.");
  EXPECT_EQ(part.toolchain.name, "nvrtc");
  EXPECT_EQ(part.toolchain.flags, cuda::Nvrtc::options());
}

// The ops whose cases run unfused too: layout copies and index kernels are what fusion and
// folding change; an elementwise op is the same loop either way.
const std::set<std::string> kUnfusedToo = {"parameter", "constant", "reshape", "transpose",
                                           "broadcast", "slice",    "concat",  "pad",
                                           "gather",    "one_hot",  "iota"};

// Whether the CUDA code generator writes every unit of `p`'s program.
bool has_kernels(const cpu_test::TestProgram& p, backend::CompileOptions options = {}) {
  try {
    cuda::generate_program(cuda::lower(p.g, options.passes));
    return true;
  } catch (const Error& e) {
    if (!has(e.what(), "has no CUDA kernel yet")) throw;
    return false;
  }
}

// Every op's conformance case whose units all have kernels, in one program: NVRTC compiles it
// for sm_90 with no kernel spilling, and the same source run on the host shim matches the
// reference interpreter; again, for the layout and indexing ops, with fusion, folding and
// planning off (a kernel per node, layout ops as copies: what differs unfused).
TEST(CudaHostShim, EveryOpWithKernelsMatchesTheReferenceAndCompilesForHopper) {
  const auto cases = cpu_test::op_cases();
  backend::CompileOptions off;
  off.passes.disabled = {"fuse", "fold_layout", "plan_memory", "canonicalize", "cse"};
  std::set<std::string> without;
  cpu_test::TestProgram fused("cuda_every_op"), unfused("cuda_every_op_unfused");
  for (const OpInfo& info : all_ops()) {
    const std::string name(info.name);
    auto it = cases.find(name);
    ASSERT_NE(it, cases.end()) << name;
    cpu_test::TestProgram alone(name);
    it->second(alone);
    if (!has_kernels(alone)) {
      without.insert(name);
      continue;
    }
    it->second(fused);
    if (kUnfusedToo.count(name)) it->second(unfused);
  }
  EXPECT_EQ(without, kWithoutKernel);
  auto client = cuda::make_host_shim_client();
  for (const auto& [p, options] :
       {std::pair{&fused, backend::CompileOptions{}}, std::pair{&unfused, off}}) {
    std::unique_ptr<backend::Executable> exe = client->compile(p->g, options);
    const auto& shim = dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled();
    EXPECT_GE(shim.program.launches.size(), 20u) << p->g.name();
    std::set<std::string> kernels;  // launches of one text share a kernel
    for (const cuda::Launch& l : shim.program.launches) {
      if (!l.gemm) kernels.insert(l.kernel);
    }
    EXPECT_EQ(shim.kernels.size(), kernels.size()) << p->g.name();
    for (const cuda::KernelResources& k : shim.kernels) EXPECT_FALSE(k.spills()) << k.name;
    expect_matches(*client, *exe, *p);
  }
}

// The differentiable ops whose gradient program still has a unit without a CUDA kernel.
const std::set<std::string> kGradientsWithoutKernel = {};

// The gradient of every differentiable op whose backward program has kernels, in one program,
// on the host shim against the reference interpreter.
TEST(CudaHostShim, GradientsWithKernelsMatchTheReference) {
  const auto cases = cpu_test::grad_cases();
  std::set<std::string> without;
  cpu_test::TestProgram all("cuda_grads", 7);
  std::vector<NodeId> ys;
  for (const OpInfo& info : all_ops()) {
    if (!info.differentiable) continue;
    const std::string name(info.name);
    auto it = cases.find(name);
    ASSERT_NE(it, cases.end()) << name;
    cpu_test::TestProgram alone(name, 7);
    const NodeId y = it->second(alone);
    if (!has_kernels(with_gradients(alone, {y}))) {
      without.insert(name);
      continue;
    }
    ys.push_back(it->second(all));
  }
  EXPECT_EQ(without, kGradientsWithoutKernel);
  const cpu_test::TestProgram vg = with_gradients(all, ys);
  auto client = cuda::make_host_shim_client();
  std::unique_ptr<backend::Executable> exe = client->compile(vg.g, {});
  expect_matches(*client, *exe, vg);
}

// Records the graphs it is asked to prepare and compiles none: a step traced, not built. Values
// still go to the runtime's device (the training state's Variables).
class TraceOnlyJit : public Jit {
 public:
  explicit TraceOnlyJit(std::shared_ptr<Jit> device) : device_(std::move(device)) {}
  std::string name() const override { return "trace-only"; }
  std::shared_ptr<Runnable> prepare(const Graph& graph, const ProgramRequest&) override {
    graphs.push_back(graph);
    struct Unrunnable : Runnable {
      std::vector<Buffer> run(std::span<const Buffer>) override {
        throw Error("[test] a trace-only program does not run");
      }
    };
    return std::make_shared<Unrunnable>();
  }
  Buffer to_device(const Array& host) override { return device_->to_device(host); }
  Buffer allocate(DType dtype, const Shape& shape, bool zeroed) override {
    return device_->allocate(dtype, shape, zeroed);
  }
  std::vector<Graph> graphs;

 private:
  std::shared_ptr<Jit> device_;
};

// The presets whose train step still has a unit without a CUDA kernel.
const std::set<std::string> kPresetsWithoutKernels = {};

// One train step of every preset (one micro-batch) lowers for CUDA and NVRTC compiles every
// kernel for sm_90 without spilling; the layers' repeated units share kernels.
TEST(CudaPresets, OneStepOfEachCompilesForHopperWithoutSpills) {
  std::set<std::string> without;
  for (const std::string& name : nn::gpt_preset_names()) {
    SCOPED_TRACE(name);
    const nn::GptConfig c = nn::gpt_preset(name);
    auto jit = std::make_shared<TraceOnlyJit>(current_jit());
    JitScope scope(jit);
    const train::TrainState state = train::allocated_state(c, false);
    auto step = train::make_train_step(c);
    step.prepare(state.params.tensors(), state.m.tensors(), state.v.tensors(),
                 state.counters.tensors(), testing_support::rows_batch(1, c.batch, c.seq, c.vocab),
                 train::step_scalars(train::Hyper{}, 1));
    ASSERT_EQ(jit->graphs.size(), 1u);
    cuda::CudaProgram program;
    try {
      program = cuda::generate_program(cuda::lower(jit->graphs.front()));
    } catch (const Error& e) {
      if (!has(e.what(), "has no CUDA kernel yet")) throw;
      without.insert(name);
      continue;
    }
    const cuda::Cubin cubin = cuda::Nvrtc::load(kToolkit).compile(program.source, name, "sm_90");
    std::set<std::string> kernels;
    for (const cuda::Launch& l : program.launches) {
      if (!l.gemm) kernels.insert(l.kernel);
    }
    EXPECT_EQ(cubin.kernels.size(), kernels.size());
    EXPECT_LT(kernels.size() * 2, program.launches.size()) << "layers share their kernels";
    std::map<cuda::GemmCall::Addend, int> addends;
    for (const cuda::Launch& l : program.launches) {
      if (l.gemm) ++addends[l.gemm->addend];
    }
    // The adds cuBLASLt makes itself: residuals (code-s's blocks have no bias), or biases (in
    // gpt2's, most bias adds share their loop with a residual or GELU; one per layer does not).
    const cuda::GemmCall::Addend added =
        c.bias ? cuda::GemmCall::Addend::row_vector : cuda::GemmCall::Addend::matrix;
    EXPECT_GE(addends[added], c.layers);
    std::map<cuda::GemmCall::Activation, int> activations;
    int inputs_stored = 0;
    for (const cuda::Launch& l : program.launches) {
      if (!l.gemm) continue;
      ++activations[l.gemm->activation];
      inputs_stored += l.gemm->activation == cuda::GemmCall::Activation::gelu && l.gemm->aux;
    }
    // GPT-2's MLP: the forward's GELU and the backward's gradient as cuBLASLt's epilogues, in
    // every layer (the forward storing the GELU input the backward reads).
    const int gelus = c.mlp == "gelu" && c.bias ? static_cast<int>(c.layers) : 0;
    EXPECT_EQ(activations[cuda::GemmCall::Activation::gelu], gelus);
    EXPECT_EQ(inputs_stored, gelus);
    EXPECT_EQ(activations[cuda::GemmCall::Activation::gelu_gradient], gelus);
    for (const cuda::KernelResources& k : cubin.kernels) EXPECT_FALSE(k.spills()) << k.name;
  }
  EXPECT_EQ(without, kPresetsWithoutKernels);
}

// Under matmul_precision = bf16 the attention family runs on tensor cores (wmma tiles of 16,
// head_dim 32 here) and matches the reference within bf16's tolerance: 4 query heads over 2 kv
// heads, T = 40 (a partial last tile), documents, both layouts; NVRTC compiles its PTX for sm_90.
TEST(CudaHostShim, Bf16AttentionRunsOnTensorCores) {
  cpu_test::TestProgram p("tensor_core_attention", 11);
  Ints doc;
  for (int64_t i = 0; i < 80; ++i) doc.push_back(i % 40 < 5 ? 0 : i % 40 < 21 ? 1 : 2);
  const NodeId q = p.random(DType::f32, {2, 4, 40, 32}, -1, 1);
  const NodeId k = p.random(DType::f32, {2, 2, 40, 32}, -1, 1);
  const NodeId v = p.random(DType::f32, {2, 2, 40, 32}, -1, 1);
  const NodeId ids = p.op(Op::reshape, {p.ints(DType::i64, doc)}, {{"shape", Ints{2, 40}}});
  const Attrs scale{{"scale", 0.3}};
  const cpu_test::Tol bf16{3e-2, 3e-2, true};
  p.out(p.op(Op::attention, {q, k, v, ids}, scale), "attention, documents", bf16);
  p.out(p.op(Op::attention, {q, k, v}, scale), "attention, causal", bf16);
  p.out(p.op(Op::attention_lse, {q, k, ids}, scale), "attention_lse", bf16);
  const NodeId out = p.random(DType::f32, {2, 4, 40, 32}, -1, 1);
  const NodeId dout = p.random(DType::f32, {2, 4, 40, 32}, -1, 1);
  const NodeId lse = p.random(DType::f32, {2, 4, 40}, 1, 3);
  for (Op op : {Op::attention_dq, Op::attention_dk, Op::attention_dv}) {
    p.out(p.op(op, {q, k, v, out, dout, lse, ids}, scale), std::string(op_name(op)), bf16);
  }
  const NodeId qt = p.random(DType::f32, {2, 40, 4, 32}, -1, 1);
  const NodeId kt = p.random(DType::f32, {2, 40, 2, 32}, -1, 1);
  p.out(p.op(Op::attention, {qt, kt, kt}, {{"scale", 0.3}, {"layout", std::string("bthd")}}),
        "attention, bthd", bf16);
  // head_dim 128, the largest the kernels take (two warps a block), without spilling.
  std::vector<NodeId> wide;  // q, k, v, out, dout
  for (int i = 0; i < 5; ++i) wide.push_back(p.random(DType::f32, {1, 2, 20, 128}, -0.5, 0.5));
  wide.push_back(p.random(DType::f32, {1, 2, 20}, 1, 3));  // lse
  p.out(p.op(Op::attention, {wide[0], wide[1], wide[2]}, scale), "attention, head_dim 128", bf16);
  for (Op op : {Op::attention_dq, Op::attention_dk, Op::attention_dv}) {
    p.out(p.op(op, wide, scale), std::string(op_name(op)) + ", head_dim 128", bf16);
  }
  backend::CompileOptions options;
  options.matmul_precision = "bf16";
  auto client = cuda::make_host_shim_client();
  std::unique_ptr<backend::Executable> exe = client->compile(p.g, options);
  const cuda::CompiledProgram& c = dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled();
  int on_tensor_cores = 0;
  for (const cuda::Launch& l : c.program.launches) on_tensor_cores += has(l.what, "attention");
  EXPECT_EQ(on_tensor_cores, 11);
  EXPECT_TRUE(has(c.program.source, "keel_mma(acc[dj], fp, fr)")) << "no tensor-core tile";
  EXPECT_FALSE(has(c.program.source, "keel_warp_sum(score)")) << "a warp-per-row kernel is left";
  EXPECT_FALSE(
      has(cuda::generate_program(p.g, options, "sm_75").source, "keel_mma(acc[dj], fp, fr)"))
      << "bf16 wmma needs sm_80";
  for (const cuda::KernelResources& r : c.kernels) EXPECT_FALSE(r.spills()) << r.name;
  expect_matches(*client, *exe, p);
}

// Products become cuBLASLt calls over the operands where they lie when each matrix has a unit
// stride and a leading dimension (a transposed operand included), and over a row-major copy
// otherwise; the shim runs each call as described, so a wrong stride shows against the reference.
TEST(CudaHostShim, ProductsAreCublasCallsOverTheOperandsOrTheirCopies) {
  cpu_test::TestProgram p("products");
  auto dot = [&](NodeId a, NodeId b, Ints lb, Ints rb, Ints lc, Ints rc) {
    return p.op(Op::dot_general, {a, b},
                {{"lhs_batch", lb}, {"rhs_batch", rb}, {"lhs_contract", lc}, {"rhs_contract", rc}});
  };
  const NodeId x = p.random(DType::f32, {4, 6, 8}), w = p.random(DType::f32, {8, 5});
  const NodeId dy = p.random(DType::f32, {4, 6, 5});
  p.out(dot(x, w, {}, {}, {2}, {0}), "x w: row-major, no copy");
  p.out(dot(x, dy, {}, {}, {0, 1}, {0, 1}), "x^T dy: a transposed, no copy");
  p.out(dot(x, x, {0}, {0}, {2}, {2}), "batched x x^T: b transposed, no copy");
  const NodeId z = p.random(DType::f32, {4, 8, 3});
  p.out(dot(x, z, {}, {}, {0, 2}, {0, 1}), "contracting dims apart: a copy of x");
  const NodeId xb = p.random(DType::bf16, {6, 8}), wb = p.random(DType::bf16, {8, 5});
  p.out(p.op(Op::dot_general, {xb, wb},
             {{"lhs_batch", Ints{}},
              {"rhs_batch", Ints{}},
              {"lhs_contract", Ints{1}},
              {"rhs_contract", Ints{0}},
              {"preferred_element_type", DType::f32}}),
        "bf16 operands, f32 result");
  auto client = cuda::make_host_shim_client();
  std::unique_ptr<backend::Executable> exe = client->compile(p.g, {});
  const cuda::CudaProgram& program =
      dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled().program;
  std::vector<const cuda::GemmCall*> calls;
  int copies = 0;
  for (const cuda::Launch& l : program.launches) {
    if (l.gemm) calls.push_back(&*l.gemm);
    copies += has(l.what, "operand copy") ? 1 : 0;
  }
  EXPECT_GE(program.arena_bytes, 4 * 6 * 8 * 4);  // the copy of x, past the planned arena
  ASSERT_EQ(calls.size(), 5u);
  EXPECT_EQ(copies, 1);  // x, for the product over its first and last dims
  // x w: a is x as [24 x 8] row-major, b is w as [8 x 5].
  EXPECT_EQ(calls[0]->a, (cuda::MatrixLayout{24, 8, 8, 1, {0}}));
  EXPECT_EQ(calls[0]->b, (cuda::MatrixLayout{8, 5, 5, 1, {0}}));
  // x^T dy: a is x seen as [8 x 24] with unit row stride (column-major), no copy.
  EXPECT_EQ(calls[1]->a, (cuda::MatrixLayout{8, 24, 1, 8, {0}}));
  EXPECT_EQ((std::vector<int64_t>{calls[1]->m, calls[1]->n, calls[1]->k}),
            (std::vector<int64_t>{8, 5, 24}));
  // Batched x x^T: four entries 48 elements apart; b is x^T, unit row stride.
  EXPECT_EQ(calls[2]->b, (cuda::MatrixLayout{8, 6, 1, 8, {0, 48, 96, 144}}));
  // The copy of x is [6 x 32] row-major in arena scratch, its dims in (free, contract) order.
  EXPECT_EQ(calls[3]->a, (cuda::MatrixLayout{6, 32, 32, 1, {0}}));
  EXPECT_EQ(calls[3]->b, (cuda::MatrixLayout{32, 3, 3, 1, {0}}));
  EXPECT_EQ(calls[4]->operand, DType::bf16);
  EXPECT_EQ(calls[4]->result, DType::f32);
  expect_matches(*client, *exe, p);
}

// A compiled program serializes into the executable cache's form (a JSON header holding the
// launch table and source, then the cubin) and loads back as it was; bytes that are
// not such an executable, or whose header names a kernel or a place that is not there, are
// refused in one line.
TEST(CudaExecutable, SerializesTheLaunchTableAndCubinAndRefusesBadBytes) {
  const cpu_test::TestProgram p = cuda_test::product_reduce_copy("serialized");
  const cuda::CompiledProgram c =
      cuda::compile_generated(cuda::generate_program(p.g, {}), kToolkit, "sm_90");
  const std::string bytes = cuda::serialize_program(c);
  const cuda::CompiledProgram back = cuda::deserialize_program(bytes);
  EXPECT_EQ(back.cubin, c.cubin);
  EXPECT_EQ(back.arch, "sm_90");
  EXPECT_EQ(back.program.source, c.program.source);
  EXPECT_EQ(back.program.inputs, c.program.inputs);
  EXPECT_EQ(back.program.outputs, c.program.outputs);
  EXPECT_EQ(back.program.arena_bytes, c.program.arena_bytes);
  ASSERT_EQ(back.program.launches.size(), c.program.launches.size());
  bool gemm = false;
  for (size_t i = 0; i < c.program.launches.size(); ++i) {
    const cuda::Launch &a = back.program.launches[i], &b = c.program.launches[i];
    EXPECT_EQ(a.kernel, b.kernel);
    EXPECT_EQ(a.grid, b.grid);
    EXPECT_EQ(a.block, b.block);
    EXPECT_EQ(a.args, b.args);
    EXPECT_EQ(a.param_types, b.param_types);
    EXPECT_EQ(a.synchronizes, b.synchronizes);
    ASSERT_EQ(a.gemm.has_value(), b.gemm.has_value());
    if (a.gemm) {
      gemm = true;
      EXPECT_EQ(a.gemm->a, b.gemm->a);
      EXPECT_EQ(a.gemm->b, b.gemm->b);
      EXPECT_EQ((std::vector<int64_t>{a.gemm->m, a.gemm->n, a.gemm->k}),
                (std::vector<int64_t>{b.gemm->m, b.gemm->n, b.gemm->k}));
      EXPECT_EQ(a.gemm->addend, b.gemm->addend);
    }
  }
  EXPECT_TRUE(gemm);
  ASSERT_EQ(back.program.copies_after.size(), 1u);
  EXPECT_EQ(back.program.copies_after[0].from, c.program.copies_after[0].from);
  EXPECT_EQ(back.program.copies_after[0].to, c.program.copies_after[0].to);
  EXPECT_EQ(back.kernels.size(), c.kernels.size());
  EXPECT_EQ(cuda::serialize_program(back), bytes);  // what loads serializes the same
  auto refusal = [](const std::string& b) {
    try {
      cuda::deserialize_program(b);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  std::string flipped = bytes;
  flipped[flipped.size() - 10] ^= 1;
  EXPECT_TRUE(has(refusal(flipped), "[backend.cuda] load: the payload's bytes do not match"));
  EXPECT_TRUE(has(refusal(bytes.substr(0, bytes.size() - 1)), "truncated or padded"));
  EXPECT_TRUE(has(refusal("{\"magic\":\"keel-cpu-executable\"}\n"), "magic"));
  EXPECT_TRUE(has(refusal("not an executable"), "no JSON header line"));
  std::string renamed = bytes;
  const std::string k0 = "\"kernel\":\"k0\"";
  const size_t at = renamed.find(k0);
  ASSERT_NE(at, std::string::npos);
  renamed.replace(at, k0.size(), "\"kernel\":\"k9\"");
  EXPECT_TRUE(has(refusal(renamed), "launches kernel 'k9', which the cubin's report does not name"))
      << refusal(renamed);
  // A product plus a residual: its addend, the fourth argument, travels; one without it is
  // refused.
  cpu_test::TestProgram r("serialized_residual");
  const NodeId product =
      r.op(Op::dot_general, {r.random(DType::f32, {4, 8}), r.random(DType::f32, {8, 5})},
           {{"lhs_batch", Ints{}},
            {"rhs_batch", Ints{}},
            {"lhs_contract", Ints{1}},
            {"rhs_contract", Ints{0}}});
  r.out(r.op(Op::add, {product, r.random(DType::f32, {4, 5})}), "x w + residual");
  const std::string residual = cuda::serialize_program(
      cuda::compile_generated(cuda::generate_program(r.g, {}), kToolkit, "sm_90"));
  const cuda::CompiledProgram loaded = cuda::deserialize_program(residual);
  ASSERT_EQ(loaded.program.launches.size(), 1u);
  ASSERT_TRUE(loaded.program.launches[0].gemm);
  EXPECT_EQ(loaded.program.launches[0].gemm->addend, cuda::GemmCall::Addend::matrix);
  EXPECT_EQ(loaded.program.launches[0].args.size(), 4u);
  std::string dropped = residual;
  const size_t addend = dropped.find("\"addend\":1");
  ASSERT_NE(addend, std::string::npos);
  dropped.replace(addend, 10, "\"addend\":0");
  EXPECT_TRUE(has(refusal(dropped), "is not a product of 3 buffers")) << refusal(dropped);
  std::string elsewhere = bytes;
  const size_t arena = elsewhere.find("[2,0,");
  ASSERT_NE(arena, std::string::npos);
  elsewhere.replace(arena, 5, "[2,0,999999999");
  EXPECT_TRUE(has(refusal(elsewhere), "names a place outside the program's buffers"))
      << refusal(elsewhere);
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    const size_t where = b.find(from);
    EXPECT_NE(where, std::string::npos) << from;
    if (where != std::string::npos) b.replace(where, from.size(), to);
    return refusal(b);
  };
  // Structure, ranges and consistency, each one line (never a JSON library's exception).
  EXPECT_TRUE(has(edited("\"copies_after\":[", "\"copies_after\":[7,"),
                  "copies_after entry 0 is not an object"));
  EXPECT_TRUE(has(edited("\"aliases\":[-1,-1]", "\"aliases\":[-1]"),
                  "'aliases' is missing or not one entry per output"));
  EXPECT_TRUE(has(edited("[0,0,0]", "[0,4294967296,0]"), "outside [0, 2147483647]"));
  EXPECT_TRUE(has(edited("\"m\":6", "\"m\":7"), "sizes and layouts disagree"));
  EXPECT_TRUE(has(edited("\"launches\":[", "\"launches\":[[],"), "launch 0 is not an object"));
  EXPECT_TRUE(has(edited("\"shape\":[6,8]", "\"shape\":[4294967296,4294967296]"), "bad dimension"));
}

TEST(CudaGemmCall, TakesOneUnitStrideWithItsLeadingDimensionAndEvenBatches) {
  using cuda::GemmCall;
  using cuda::MatrixLayout;
  EXPECT_TRUE(GemmCall::blas_layout(MatrixLayout{3, 4, 4, 1, {0}}));           // row-major
  EXPECT_TRUE(GemmCall::blas_layout(MatrixLayout{3, 4, 1, 3, {0}}));           // column-major
  EXPECT_TRUE(GemmCall::blas_layout(MatrixLayout{3, 4, 6, 1, {0, 20}}));       // padded rows
  EXPECT_FALSE(GemmCall::blas_layout(MatrixLayout{3, 4, 2, 1, {0}}));          // rows overlap
  EXPECT_FALSE(GemmCall::blas_layout(MatrixLayout{3, 4, 8, 2, {0}}));          // no unit stride
  EXPECT_FALSE(GemmCall::blas_layout(MatrixLayout{3, 4, 4, 1, {0, 12, 30}}));  // uneven batch
  EXPECT_TRUE(GemmCall::blas_layout(MatrixLayout{1, 4, 99, 7, {0}}));          // one row: any
}

// A kernel whose block never meets at a barrier is reported by the shim, not hung on.
TEST(CudaHostShim, ABarrierSomeThreadsNeverReachIsADeadlockNotAHang) {
  // Reductions are the kernels with barriers; one over 300 elements uses 256-thread blocks.
  cpu_test::TestProgram p("reduce_rows");
  const NodeId x = p.random(DType::f32, {4, 300});
  p.out(p.op(Op::reduce_sum, {x}, cpu_test::reduce_attrs({1}, 0)), "row sums");
  auto client = cuda::make_host_shim_client();
  cpu_test::check(*client, p);
  // The same kernel with its first barrier made conditional: threads 128..255 never arrive.
  cuda::CudaProgram program = cuda::generate_program(cuda::lower(p.g));
  const size_t at = program.source.find("__syncthreads();");
  ASSERT_NE(at, std::string::npos) << program.source;
  program.source.insert(at, "if (threadIdx.x < 128) ");
  auto exe = client->load_compiled({program, "sm_90", "", {}});
  try {
    exe->execute(cpu_test::buffers(*client, p.inputs));
    ADD_FAILURE() << "a barrier half the block never reaches did not stop the kernel";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "deadlocked at a barrier on the host shim")) << e.what();
  }
}

}  // namespace
}  // namespace keel
