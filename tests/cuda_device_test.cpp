// The CUDA client on a GPU (issue 49), checked on the emulated GPU: buffers in device memory
// from the caching allocator, each program's arena allocated once, one CUDA graph per set of
// buffer addresses, host reads only when asked (counted), memory_stats of the device, a
// request past the device refused in one line, and a serialized program loaded without NVRTC.
// The driver's GPU runs the same client; make device-check runs it on a real one.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>

#include "backend/cuda/blas_product.h"
#include "backend/cuda/completion_queue.h"
#include "backend/cuda/device_client.h"
#include "backend/cuda/emulated_gpu.h"
#include "backend/ref/interpreter.h"
#include "ir/error.h"
#include "tests/backend_cpu_cases.h"
#include "tests/cuda_small_program.h"

namespace keel {
namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

cpu_test::TestProgram small_program() {
  return cuda_test::product_reduce_copy("device_small");
}

void expect_reference(const std::vector<Buffer>& got, const cpu_test::TestProgram& p) {
  const std::vector<Array> want = ref::interpret(p.g, p.inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(cpu_test::difference(cpu_test::host_value(got[i]), want[i], cpu_test::kLoose), "")
        << p.checks.at(i).first;
  }
}

// Buffers live on cuda:0, in device memory; a program's first run captures its graph, runs whose
// outputs reuse the freed blocks replay it, runs on other blocks get graphs of their own up to
// four, then update the oldest in place; the host
// reads the device only through to_host; memory_stats reports the device's bytes.
TEST(CudaDevice, EachProgramIsOneGraphReplayedAndTheHostReadsOnlyWhenAsked) {
  const cpu_test::TestProgram p = small_program();
  auto gpu = cuda::make_emulated_gpu();
  auto client = cuda::make_device_client(gpu, {});
  const backend::Device device = client->devices().at(0);
  EXPECT_EQ(device.str(), "cuda:0");
  EXPECT_FALSE(device.host_memory);
  const std::vector<Buffer> args = cpu_test::buffers(*client, p.inputs);
  EXPECT_EQ(args[0].device(), "cuda:0");
  const backend::MemoryStats before = client->memory_stats(device);
  EXPECT_EQ(before.bytes_limit, gpu->info().memory_bytes);
  EXPECT_GE(before.bytes_in_use, 6 * 8 * 4 + 8 * 5 * 4);
  auto exe = client->compile(p.g, {});
  const int64_t arena =
      dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled().program.arena_bytes;
  EXPECT_EQ(client->memory_stats(device).bytes_in_use - before.bytes_in_use,
            (arena + 511) / 512 * 512)
      << "the arena is allocated once, with the executable";
  expect_reference(exe->execute(args), p);
  EXPECT_EQ(client->device_counters().host_reads, 2);  // the two outputs, read by the test
  EXPECT_EQ(client->device_counters().graph_captures, 1);
  const int64_t allocations = client->device_counters().driver_allocations;
  for (int run = 0; run < 3; ++run) {
    std::vector<Buffer> out = exe->execute(args);  // dropped: its blocks go back to the cache
    out.back().ready().wait();
  }
  const cuda::DeviceClientCounters c = client->device_counters();
  EXPECT_EQ(c.graph_captures, 1) << "the outputs reuse the same blocks: one graph";
  EXPECT_EQ(c.graph_replays, 4);
  EXPECT_EQ(c.host_reads, 2) << "no run read the device from the host";
  EXPECT_EQ(c.driver_allocations, allocations) << "the cache served every output";
  EXPECT_EQ(gpu->counters().graph_replays, 4);
  EXPECT_EQ(gpu->counters().products, 4) << "each replay runs the recorded product";
  EXPECT_EQ(gpu->counters().kernel_launches % 4, 0) << "each replay runs every kernel";
  EXPECT_GT(gpu->counters().kernel_launches, 0);
  EXPECT_EQ(gpu->counters().host_copies, 2);
  EXPECT_EQ(c.graph_updates, 0);
  // Outputs still held: after the first (the cached blocks again), each run's lie elsewhere. A
  // new graph for each address set up to four, then the least recently run one is updated.
  std::vector<std::vector<Buffer>> held;
  for (int run = 0; run < 5; ++run) held.push_back(exe->execute(args));
  EXPECT_EQ(client->device_counters().graph_captures, 4);
  EXPECT_EQ(client->device_counters().graph_updates, 1);
  const std::vector<Buffer> again = held.back();
  expect_reference(again, p);
  EXPECT_GE(client->memory_stats(device).peak_bytes_in_use,
            client->memory_stats(device).bytes_in_use);
  // A buffer another client made is refused with one line.
  auto other = cuda::make_device_client(cuda::make_emulated_gpu(), {});
  try {
    exe->execute(cpu_test::buffers(*other, p.inputs));
    ADD_FAILURE() << "another client's buffer ran";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "(another client's) given to a program on cuda:0")) << e.what();
  }
}

// A request past the device's memory, with the cache emptied first, is one line naming the
// device, the request and what is in use.
TEST(CudaDevice, ARequestPastTheDeviceIsOneLineNamingIt) {
  cuda::HostShimOptions small;
  small.memory_bytes = 1 << 20;
  auto client = cuda::make_host_shim_client(small);
  const backend::Device device = client->devices().at(0);
  {
    const Buffer held = client->allocate(DType::f32, {1 << 17}, device, true);  // 512 KiB
    EXPECT_EQ(client->memory_stats(device).bytes_in_use, 1 << 19);
  }
  EXPECT_EQ(client->memory_stats(device).bytes_in_use, 0);
  EXPECT_EQ(client->device_counters().cached_bytes, 1 << 19);
  // 768 KiB fits only once the cached 512 KiB block goes back to the device.
  const Buffer big = client->allocate(DType::f32, {3 << 16}, device, false);
  EXPECT_EQ(client->device_counters().cached_bytes, 0);
  try {
    client->to_device(Array(DType::f32, {1 << 17}), device);
    ADD_FAILURE() << "a request past the device was granted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(has(what, "[backend.cuda] out of memory on cuda:0")) << what;
    EXPECT_TRUE(has(what, "524288 bytes for a f32[131072] buffer from the host")) << what;
    EXPECT_TRUE(has(what, "786432 bytes in use")) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_EQ(client->memory_stats(device).peak_bytes_in_use, 3 << 18);
  const Buffer zeros = client->allocate(DType::f32, {4}, device, true);
  EXPECT_EQ(cpu_test::host_value(zeros).to_f32(), (std::vector<float>{0, 0, 0, 0}));
}

// What the executable cache holds loads on the device without NVRTC and runs the same; bytes
// compiled for another architecture are refused in one line.
TEST(CudaDevice, ASerializedProgramLoadsAndRunsTheSame) {
  const cpu_test::TestProgram p = small_program();
  auto client = cuda::make_host_shim_client();
  auto exe = client->compile(p.g, {});
  const std::string bytes = exe->serialize();
  auto loaded = client->load(bytes);
  EXPECT_EQ(loaded->serialize(), bytes);
  const std::vector<Buffer> args = cpu_test::buffers(*client, p.inputs);
  const std::vector<Buffer> a = exe->execute(args), b = loaded->execute(args);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(cpu_test::difference(cpu_test::host_value(a[i]), cpu_test::host_value(b[i]), {}), "");
  }
  auto ampere = cuda::make_device_client(cuda::make_emulated_gpu(), {"/usr/local/cuda", "sm_80"});
  try {
    ampere->load(bytes);
    ADD_FAILURE() << "an sm_90 executable loaded for sm_80";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "compiled for sm_90, and this device is sm_80")) << e.what();
  }
}

// The emulated GPU fills shared memory with NaN bytes at each launch: a kernel reading what it
// never wrote gets garbage there too, as on a GPU, not the zeros of a C++ static.
TEST(CudaDevice, SharedMemoryStartsAsGarbageOnTheEmulatedGpu) {
  cuda::CompiledProgram c;
  c.arch = "sm_90";
  c.program.graph_name = "unwritten_shared";
  c.program.outputs = {TensorType{DType::f32, {32}}};
  c.program.source =
      "extern \"C\" __global__ void k0(float* a0) {\n"
      "  __shared__ float never_written[32];\n"
      "  a0[threadIdx.x] = never_written[threadIdx.x];\n}\n";
  cuda::Launch l;
  l.kernel = "k0";
  l.block = 32;
  l.args = {cuda::Slot{cuda::Slot::Kind::output, 0, 0}};
  l.param_types = {"float*"};
  c.program.launches = {l};
  auto client = cuda::make_host_shim_client();
  const Array out = cpu_test::host_value(client->load_compiled(c)->execute({}).at(0));
  for (float v : out.to_f32()) EXPECT_TRUE(std::isnan(v)) << v;
}

// Row-major products as cuBLASLt's column-major ones: c^T = op(b's storage) op(a's storage),
// a row-major operand untransposed, a column-major one transposed, leading dims kept.
TEST(CudaBlasProduct, RowMajorOperandsAreColumnMajorTransposes) {
  cuda::GemmCall call;
  call.batch = 2;
  call.m = 3;
  call.n = 4;
  call.k = 5;
  call.a = {3, 5, 8, 1, {0, 24}};  // row-major, leading dim 8
  call.b = {5, 4, 1, 6, {2, 32}};  // column-major, leading dim 6, first entry at 2
  const cuda::BlasProduct p = cuda::blas_product(call);
  EXPECT_EQ((std::vector<int64_t>{p.m, p.n, p.k, p.batch, p.ldc}),
            (std::vector<int64_t>{4, 3, 5, 2, 4}));
  EXPECT_EQ(p.x, (cuda::BlasMatrix{5, 4, 6, true, 2, 30}));
  EXPECT_EQ(p.y, (cuda::BlasMatrix{5, 3, 8, false, 0, 24}));
  // Vectors take whichever order their unit stride allows.
  call.batch = 1;
  call.m = 1;
  call.a = {1, 5, 0, 3, {0}};
  call.b = {5, 4, 4, 1, {0}};
  const cuda::BlasProduct v = cuda::blas_product(call);
  EXPECT_EQ(v.y, (cuda::BlasMatrix{1, 5, 3, true, 0, 0}));
  EXPECT_EQ(v.x, (cuda::BlasMatrix{4, 5, 4, false, 0, 0}));
  call.a = {3, 5, 2, 2, {0}};  // no unit stride: never described
  EXPECT_THROW(cuda::blas_product(call), Error);
}

// A mark on the stream not yet reached: its event waits for it, and later ones keep the order.
TEST(CudaCompletionQueue, EventsCompleteInStreamOrder) {
  struct Gate : cuda::StreamMark {
    std::atomic<bool> open{false};
    bool reached() const override { return open; }
    void wait() const override {
      while (!open) std::this_thread::yield();
    }
  };
  auto first = std::make_shared<Gate>(), second = std::make_shared<Gate>();
  second->open = true;
  cuda::CompletionQueue queue;
  std::atomic<int> order{0};
  int ran_first = 0, ran_second = 0;
  const Event a = queue.after(first, [&] { ran_first = ++order; });
  const Event b = queue.after(second, [&] { ran_second = ++order; });
  EXPECT_FALSE(a.done());
  EXPECT_FALSE(b.done()) << "reached, but queued behind a mark that is not";
  first->open = true;
  b.wait();
  EXPECT_TRUE(a.done());
  EXPECT_EQ(ran_first, 1);
  EXPECT_EQ(ran_second, 2);
  auto third = std::make_shared<Gate>();
  const Event failed = queue.after(third, [] { throw Error("[test] the copy failed"); });
  EXPECT_FALSE(failed.done());
  third->open = true;
  EXPECT_THROW(failed.wait(), Error);
}

}  // namespace
}  // namespace keel
