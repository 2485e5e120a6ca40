// The compiled CPU backend beyond what conformance_test checks on every backend: fused patterns,
// summation order, layout folding, scans, donation, serialization, compiler failures and memory
// statistics, against the reference interpreter where they compute.
//
// Tolerances: |cpu - ref| <= atol + rtol * |ref|, NaN matching NaN, infinities exact, integers
// and bools exact. f32: rtol 1e-5, atol 1e-6 (float math vs the reference's double math, one
// rounding each). bf16: rtol 1e-2, atol 1e-2 (one bf16 ulp is 2^-8). Matmul, random graphs and
// gradients: rtol 1e-4, atol 1e-4 times the output's largest magnitude (BLAS accumulates in f32;
// chains compound ulp differences). Casts and rng: exact.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <thread>

#include <unistd.h>

#include "autodiff/grad.h"
#include "backend/collectives.h"
#include "backend/cpu/client.h"
#include "backend/cpu/codegen.h"
#include "backend/cpu/codegen_internal.h"
#include "backend/cpu/executable.h"
#include "backend/cpu/host_block_cache.h"
#include "backend/cpu/run_queue.h"
#include "backend/cpu/serialize.h"
#include "backend/cpu/settings.h"
#include "backend/cpu/target.h"
#include "backend/host_memory.h"
#include "backend/ref/client.h"
#include "backend/ref/interpreter.h"
#include "ir/error.h"
#include "ir/verify.h"
#include "passes/pipeline.h"
#include "tests/backend_cpu_cases.h"
#include "tests/backend_cpu_program.h"
#include "tests/backend_cpu_random.h"
#include "tests/fake_device.h"
#include "tests/generated_source.h"
#include "tests/huge_pages.h"
#include "tests/scan_graphs.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using namespace cpu_test;  // NOLINT: the helpers are this test's own
namespace fs = std::filesystem;

// ---- fused patterns: the loops fusion makes, at sizes that take the parallel paths ----------

TEST(CpuBackend, FusedPatternsMatchTheReference) {
  TestProgram p("fused_patterns");
  p.out(softmax(p, p.random(DType::f32, {64, 300}, -5, 5), 1), "softmax over rows");
  p.out(softmax(p, p.random(DType::f32, {300, 64}, -5, 5), 0), "softmax over columns");
  p.out(softmax(p, p.random(DType::bf16, {8, 40}, -5, 5), 1), "softmax bf16");
  // Layer norm with a learned scale and shift: two reductions and a broadcast tail.
  NodeId x = p.random(DType::f32, {128, 384});
  NodeId mean = keep_reduce(p, Op::reduce_mean, x, 1);
  NodeId d = p.op(Op::sub, {x, mean});
  NodeId var = keep_reduce(p, Op::reduce_mean, p.op(Op::mul, {d, d}), 1);
  NodeId eps = p.g.add_constant(Array::scalar(1e-5));
  NodeId norm = p.op(Op::mul, {d, p.op(Op::rsqrt, {p.op(Op::add, {var, eps})})});
  p.out(p.op(Op::add,
             {p.op(Op::mul, {norm, p.random(DType::f32, {384})}), p.random(DType::f32, {384})}),
        "layer norm", kLoose);
  // An AdamW-shaped update: one loop, three outputs, scalar hyper-parameters as inputs.
  NodeId w = p.random(DType::f32, {70000}), g = p.random(DType::f32, {70000});
  NodeId m = p.random(DType::f32, {70000}), v = p.random(DType::f32, {70000}, 0, 1);
  NodeId lr = p.random(DType::f32, {}, 0.001, 0.01), b1 = p.g.add_constant(Array::scalar(0.9));
  NodeId one = p.g.add_constant(Array::scalar(1.0));
  NodeId m2 = p.op(Op::add, {p.op(Op::mul, {b1, m}), p.op(Op::mul, {p.op(Op::sub, {one, b1}), g})});
  NodeId v2 = p.op(Op::add, {p.op(Op::mul, {b1, v}),
                             p.op(Op::mul, {p.op(Op::sub, {one, b1}), p.op(Op::mul, {g, g})})});
  NodeId step = p.op(Op::div, {m2, p.op(Op::add, {p.op(Op::sqrt, {v2}), eps})});
  p.out(p.op(Op::sub, {w, p.op(Op::mul, {lr, step})}), "adamw weights");
  p.out(m2, "adamw m");
  p.out(v2, "adamw v");
  // Broadcast shapes that take the row-parallel and the inner-parallel loop paths.
  p.out(p.op(Op::mul, {p.random(DType::f32, {1024, 64}), p.random(DType::f32, {64})}),
        "rows parallel");
  p.out(p.op(Op::add, {p.random(DType::f32, {2, 40000}), p.random(DType::f32, {2, 1})}),
        "inner parallel");
  p.out(p.op(Op::add, {p.random(DType::f32, {3, 1, 5}), p.random(DType::f32, {1, 4, 1})}),
        "outer product");
  // A reduction with an inlined broadcast producer and a value stored from inside its loop.
  NodeId big = p.random(DType::f32, {512, 1024}, -1, 1);
  NodeId sq = p.op(Op::mul, {big, big});
  p.out(p.op(Op::reduce_sum, {sq}, reduce_attrs({1}, 0)), "sum of squares", kLoose);
  p.out(p.op(Op::reduce_max, {p.op(Op::tanh, {big})}, reduce_attrs({0}, 0)), "max over rows");
  p.out(sq, "squares (also read by the reduction)");
  // A bias gradient's shape: the sum over rows also stores the bf16 copy a later product reads
  // (the cast joins the reduction; the f32 value is never stored).
  NodeId gy = p.op(Op::mul, {p.op(Op::tanh, {big}), big});
  NodeId gy16 = p.op(Op::cast, {gy}, {{"dtype", DType::bf16}});
  p.out(p.op(Op::reduce_sum, {gy}, reduce_attrs({0}, 0)), "bias gradient", kLoose);
  Attrs wide{{"lhs_batch", std::vector<int64_t>{}},
             {"rhs_batch", std::vector<int64_t>{}},
             {"lhs_contract", std::vector<int64_t>{0}},
             {"rhs_contract", std::vector<int64_t>{0}},
             {"preferred_element_type", DType::f32}};
  NodeId w16 = p.op(Op::cast, {p.random(DType::f32, {512, 24})}, {{"dtype", DType::bf16}});
  p.out(p.op(Op::dot_general, {gy16, w16}, wide), "product of the stored copy", kLoose);
  // Whole-array sums: one output, so the terms are split across threads.
  p.out(p.op(Op::reduce_sum, {sq}, reduce_attrs({0, 1}, 0)), "total", kLoose);
  NodeId scaled = p.op(Op::mul, {big, p.random(DType::f32, {1024})});
  p.out(p.op(Op::reduce_mean, {scaled}, reduce_attrs({0, 1}, 1)), "total of a broadcast", kLoose);
  // bf16 chains round after every op, like the reference's stores.
  NodeId h = p.op(Op::cast, {p.random(DType::f32, {9, 33})}, {{"dtype", DType::bf16}});
  NodeId hh = p.op(Op::tanh, {p.op(Op::mul, {h, p.op(Op::exp, {h})})});
  p.out(p.op(Op::cast, {p.op(Op::add, {hh, h})}, {{"dtype", DType::f32}}), "bf16 chain", kBF16);
  check(p);
}

// Float sums accumulate in float, in lanes and row blocks: a plain running float sum of these
// is off by 1.4e-4 (columns) and 5e-4 (total), the blocked order by about 2e-6.
TEST(CpuBackend, FloatSumsAccumulateInABlockedOrder) {
  TestProgram p("float_sums");
  const Tol tight{2e-5, 0};
  NodeId tenth = p.random(DType::f32, {100000, 16}, 0.1, 0.1);
  p.out(p.op(Op::reduce_sum, {tenth}, reduce_attrs({0}, 0)), "column sums", tight);
  NodeId flat = p.random(DType::f32, {400000}, 0.1, 0.1);
  p.out(p.op(Op::reduce_sum, {flat}, reduce_attrs({0}, 0)), "total", tight);
  NodeId rows = p.random(DType::f32, {8, 50000}, 0.1, 0.1);
  p.out(p.op(Op::reduce_sum, {rows}, reduce_attrs({1}, 0)), "row sums", tight);
  p.out(p.op(Op::reduce_mean, {rows}, reduce_attrs({1}, 0)), "row means", tight);
  check(p);
}

// A column sum over many rows adds each block of 64 rows into a partial row, then the blocks'
// partials in order (two passes over the team): the bits are those of that order, with a
// ragged last block and column tile, several output rows, and a value stored from the loop.
TEST(CpuBackend, ColumnSumsAddTheirRowBlocksInOrder) {
  TestProgram p("column_sums");
  const NodeId x = p.random(DType::f32, {1000, 300}, -1, 1);
  const NodeId y = p.random(DType::f32, {3, 130, 300}, -1, 1);
  const NodeId sq = p.op(Op::mul, {x, x});
  p.out(p.op(Op::reduce_sum, {sq}, reduce_attrs({0}, 0)), "column sums", kLoose);
  p.out(sq, "squares (stored from the sum's loop)");
  p.out(p.op(Op::reduce_sum, {y}, reduce_attrs({1}, 0)), "sums over the middle axis", kLoose);
  const std::vector<Array> got = check(p);
  ASSERT_EQ(got.size(), 3u);
  // Both sums take the two-pass path (the one-pass loop adds the same blocks in the same order,
  // so only the source tells them apart): each writes its blocks' partial rows.
  const std::string src = cpu::generate_source(cpu::lower(p.g)).text;
  size_t partial_rows = 0;
  for (size_t at = src.find("blk = part + w *"); at != std::string::npos;
       at = src.find("blk = part + w *", at + 1)) {
    ++partial_rows;
  }
  EXPECT_EQ(partial_rows, 2u) << "a column sum took the one-pass loop";
  // The blocked order on the host: rows [o][q][c], a sum over q for each (o, c).
  auto blocked = [](const Array& in, int64_t rows, int64_t q_total, int64_t cols, bool square) {
    std::vector<float> want(static_cast<size_t>(rows * cols));
    const auto* v = reinterpret_cast<const float*>(in.data());
    for (int64_t o = 0; o < rows; ++o) {
      for (int64_t c = 0; c < cols; ++c) {
        float acc = 0.0f;
        for (int64_t qb = 0; qb < q_total; qb += 64) {
          float blk = 0.0f;
          for (int64_t q = qb; q < std::min(qb + 64, q_total); ++q) {
            const float e = v[(o * q_total + q) * cols + c];
            blk += square ? e * e : e;
          }
          acc += blk;
        }
        want[static_cast<size_t>(o * cols + c)] = acc;
      }
    }
    return want;
  };
  const std::vector<float> want_x = blocked(p.inputs[0], 1, 1000, 300, true);
  const std::vector<float> want_y = blocked(p.inputs[1], 3, 130, 300, false);
  EXPECT_EQ(std::memcmp(got[0].data(), want_x.data(), want_x.size() * 4), 0)
      << "column sums: not the row-block order";
  EXPECT_EQ(std::memcmp(got[2].data(), want_y.data(), want_y.size() * 4), 0)
      << "sums over the middle axis: not the row-block order";
  // A running sum over the rows differs: the test tells the orders apart.
  const auto* v = reinterpret_cast<const float*>(p.inputs[0].data());
  float running = 0.0f;
  for (int64_t q = 0; q < 1000; ++q) running += v[q * 300] * v[q * 300];
  float blocked0 = 0.0f;
  std::memcpy(&blocked0, got[0].data(), 4);
  EXPECT_NE(running, blocked0);
}

// ---- the executable: serialize / load, bad bytes, bad arguments, threads --------------------

struct Small {
  TestProgram p{"small"};
  std::unique_ptr<backend::Executable> exe;
  Small() {
    p.out(softmax(p, p.random(DType::f32, {4, 7}), 1), "softmax");
    p.out(p.op(Op::transpose, {p.random(DType::i32, {2, 3})}, {{"perm", Ints{1, 0}}}), "transpose");
    p.out(p.g.params()[0], "an input as output");
    p.out(p.g.outputs()[0], "an output twice");
    exe = cpu_client().compile(p.g, {});
  }
};

Small& small() {
  static Small s;
  return s;
}

TEST(CpuBackend, SerializeThenLoadGivesIdenticalBytes) {
  Small& s = small();
  const std::string bytes = s.exe->serialize();
  std::unique_ptr<backend::Executable> loaded = cpu_client().load(bytes);
  EXPECT_EQ(loaded->platform(), "cpu");
  EXPECT_EQ(loaded->predicted_peak_bytes(), s.exe->predicted_peak_bytes());
  EXPECT_GT(s.exe->predicted_peak_bytes(), 0);
  const auto a = s.exe->execute(buffers(s.p.inputs)), b = loaded->execute(buffers(s.p.inputs));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(host_value(a[i]).same_bytes(host_value(b[i]))) << i;
  EXPECT_TRUE(host_value(a[3]).same_bytes(host_value(a[0])));
  EXPECT_TRUE(host_value(a[2]).same_bytes(s.p.inputs[0]));
  EXPECT_EQ(loaded->serialize(), bytes);  // loading keeps the bytes, so a cache can re-publish
  // The header is one JSON line that says what the program is.
  const std::string header = bytes.substr(0, bytes.find('\n'));
  EXPECT_THAT(header, HasSubstr("\"magic\":\"keel-cpu-executable\""));
  EXPECT_THAT(header, HasSubstr("\"graph\":\"small\""));
  // Many loads alive at once, then dropped and loaded again: each keeps its own code.
  std::vector<std::unique_ptr<backend::Executable>> many;
  for (int i = 0; i < 5; ++i) many.push_back(cpu_client().load(bytes));
  many.erase(many.begin(), many.begin() + 3);
  many.push_back(cpu_client().load(bytes));
  for (auto& e : many)
    EXPECT_TRUE(host_value(e->execute(buffers(s.p.inputs))[0]).same_bytes(host_value(a[0])));
}

// A graph name is any bytes: the header stays one valid JSON line and gives the name back.
TEST(CpuBackend, HeaderKeepsAnyGraphName) {
  cpu::ExecutableHeader info;
  info.graph_name = "step\xff\n\xc3";
  const std::string so = std::string(
                             "\x7f"
                             "ELF",
                             4) +
                         "rest of a shared object";
  const std::string bytes = cpu::serialize_program(info, so);
  std::string_view so_back;
  EXPECT_EQ(cpu::deserialize_program(bytes, so_back).graph_name, info.graph_name);
  EXPECT_EQ(so_back, so);
}

void expect_load_error(const std::string& bytes, const std::string& what) {
  try {
    cpu_client().load(bytes);
    ADD_FAILURE() << "loaded bad bytes; expected an error about " << what;
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("[backend.cpu] load: "));
    EXPECT_THAT(e.what(), HasSubstr(what));
  }
}

TEST(CpuBackend, LoadRejectsBadBytes) {
  const std::string bytes = small().exe->serialize();
  const size_t eol = bytes.find('\n');
  expect_load_error(bytes.substr(0, bytes.size() - 100), "but ");
  expect_load_error(bytes.substr(0, eol / 2), "no JSON header");
  expect_load_error("", "no JSON header");
  std::string flipped = bytes;
  flipped[eol + 1 + (bytes.size() - eol) / 2] ^= 0x20;
  expect_load_error(flipped, "checksum");
  std::string garbled = bytes;
  garbled[garbled.find(':')] = '#';  // the header's syntax, not a value
  expect_load_error(garbled, "not a JSON object");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    b.replace(b.find(from), from.size(), to);
    return b;
  };
  expect_load_error(replace("keel-cpu-executable", "keel-gpu-executable"), "magic");
  expect_load_error(
      replace(fmt::format("\"abi_version\":{}", KEEL_ABI_VERSION), "\"abi_version\":9"),
      "ABI version 9");
  expect_load_error(replace("\"dtype\":\"f32\"", "\"dtype\":\"f33\""), "unknown dtype 'f33'");
  expect_load_error(ref::make_ref_client()->compile(small().p.g, {})->serialize(),
                    "no JSON header");
}

TEST(CpuBackend, ExecuteChecksItsArguments) {
  Small& s = small();
  std::vector<Array> args = s.p.inputs;
  args.pop_back();
  EXPECT_THAT([&] { s.exe->execute(buffers(args)); },
              ::testing::ThrowsMessage<Error>(HasSubstr("takes 2 inputs but 1 were given")));
  args = s.p.inputs;
  args[1] = Array(DType::i32, {3, 2});
  EXPECT_THAT([&] { s.exe->execute(buffers(args)); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("input 1 is i32[3,2] but the program expects i32[2,3]")));
}

// A collective that reaches another process runs on the thread that owns the communicators,
// after the runs dispatched before it.
class PeersCollectives final : public backend::Collectives {
 public:
  int64_t axis_size(const std::string&) const override { return 1; }
  int64_t axis_index(const std::string&) const override { return 0; }
  bool reaches_other_processes() const override { return true; }
  void all_reduce(const std::string&, ReduceKind, DType t, const void* in, void* out,
                  int64_t n) override {
    std::memmove(out, in, static_cast<size_t>(n * dtype_size(t)));
  }
  void all_gather(const std::string&, DType t, const void* in, void* out, int64_t n) override {
    std::memmove(out, in, static_cast<size_t>(n * dtype_size(t)));
  }
  void reduce_scatter(const std::string&, DType t, const void* in, void* out, int64_t n) override {
    std::memmove(out, in, static_cast<size_t>(n * dtype_size(t)));
  }
  void all_to_all(const std::string&, DType t, const void* in, void* out, int64_t n) override {
    std::memmove(out, in, static_cast<size_t>(n * dtype_size(t)));
  }
};

// With peers, runs are on their callers' threads: calls from several threads at once each get
// an arena (the shared one or their own) and compute what one call does.
TEST(CpuBackend, ConcurrentCallsGetTheirOwnArena) {
  Small& s = small();
  const Array want = host_value(s.exe->execute(buffers(s.p.inputs))[0]);
  backend::set_collectives(std::make_shared<PeersCollectives>());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i)
        bad += !host_value(s.exe->execute(buffers(s.p.inputs))[0]).same_bytes(want);
    });
  }
  for (auto& t : threads) t.join();
  backend::set_collectives(nullptr);
  EXPECT_EQ(bad.load(), 0);
}

// ---- the run queue: execute returns at once, programs run in order behind it ----------------

// Holds the CPU device's queue until open(), the end of the scope or 5 s: what is dispatched
// behind it is queued, not run, so a test can look at it first. (A call that wrongly waits for
// the queue returns after 5 s and fails its checks instead of hanging.)
class QueueGate {
 public:
  QueueGate() {
    const Event passed = Event::pending();
    cpu::run_queue().dispatch(
        [opened = opened_, passed] {
          (void)opened->wait_for(std::chrono::seconds(5));
          passed.complete();
        },
        passed);
  }
  ~QueueGate() { open(); }
  void open() {
    if (!open_) opener_.set_value();
    open_ = true;
  }

 private:
  std::promise<void> opener_;
  std::shared_ptr<std::shared_future<void>> opened_ =
      std::make_shared<std::shared_future<void>>(opener_.get_future().share());
  bool open_ = false;
};

std::vector<Array> clones(const std::vector<Array>& arrays) {
  std::vector<Array> out;
  for (const Array& a : arrays) out.push_back(a.clone());
  return out;
}

// Whether a thread's call has still not returned after 50 ms (it waits on something).
bool still_waiting(const std::atomic<bool>& returned) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return !returned.load();
}

TEST(CpuRunQueue, ExecuteReturnsBeforeTheRunAndAThirdDispatchWaits) {
  Small& s = small();
  const Array want = host_value(s.exe->execute(buffers(s.p.inputs))[0]);
  QueueGate gate;
  const std::vector<backend::Buffer> got = s.exe->execute(buffers(s.p.inputs));
  EXPECT_FALSE(got[0].ready().done()) << "execute waited for its run";
  EXPECT_EQ(cpu::run_queue().in_flight(), cpu::RunQueue::kMaxInFlight);
  EXPECT_FALSE(cpu_client().after_dispatched(backend::host_device()).done());
  // A third dispatch waits for room: the host runs at most two runs ahead.
  std::atomic<bool> returned{false};
  std::vector<backend::Buffer> third;
  std::thread caller([&] {
    third = s.exe->execute(buffers(s.p.inputs));
    returned = true;
  });
  EXPECT_TRUE(still_waiting(returned)) << "a third run was dispatched past the limit";
  gate.open();
  caller.join();
  EXPECT_TRUE(host_value(got[0]).same_bytes(want));
  EXPECT_TRUE(host_value(third[0]).same_bytes(want));
  cpu_client().after_dispatched(backend::host_device()).wait();
  cpu::run_queue().drain();  // the worker counts a run finished just after its event
  EXPECT_EQ(cpu::run_queue().in_flight(), 0);
}

TEST(CpuRunQueue, AHostWriteWaitsForTheRunsThatReadTheBuffer) {
  Small& s = small();
  const Array want = host_value(s.exe->execute(buffers(s.p.inputs))[0]);
  const std::vector<backend::Buffer> in = buffers(clones(s.p.inputs));
  QueueGate gate;
  const std::vector<backend::Buffer> got = s.exe->execute(in);
  std::atomic<bool> returned{false};
  std::thread writer([&] {
    in[0].assign_from_host(Array(in[0].dtype(), in[0].shape())).wait();  // zeros
    returned = true;
  });
  EXPECT_TRUE(still_waiting(returned)) << "the host wrote an input a queued run reads";
  gate.open();
  writer.join();
  EXPECT_TRUE(host_value(got[0]).same_bytes(want)) << "the run read the host's later write";
}

TEST(CpuRunQueue, AFailedInputFailsTheRunsOutputsWithItsErrorAndTheQueueGoesOn) {
  Small& s = small();
  std::vector<backend::Buffer> in = buffers(clones(s.p.inputs));
  const Event failed = Event::pending();
  failed.complete(std::make_exception_ptr(Error("[test] the producer of input 0 failed")));
  in[0] = backend::adopt_host_array(s.p.inputs[0].clone(), backend::host_device(), failed);
  const std::vector<backend::Buffer> got = s.exe->execute(in);
  for (const backend::Buffer& b : got) {
    EXPECT_THAT([&] { (void)host_value(b); },
                ::testing::ThrowsMessage<Error>(HasSubstr("the producer of input 0 failed")));
  }
  const Array want = host_value(s.exe->execute(buffers(s.p.inputs))[0]);  // the next one runs
  EXPECT_EQ(want.shape(), (Shape{4, 7}));
}

TEST(CpuRunQueue, AnExecutableIsDestroyedOnlyAfterItsQueuedRuns) {
  Small& s = small();
  const Array want = host_value(s.exe->execute(buffers(s.p.inputs))[0]);
  std::unique_ptr<backend::Executable> exe = cpu_client().load(s.exe->serialize());
  QueueGate gate;
  const std::vector<backend::Buffer> got = exe->execute(buffers(s.p.inputs));
  std::atomic<bool> returned{false};
  std::thread dropper([&] {
    exe.reset();  // unloads the shared object the queued run calls into
    returned = true;
  });
  EXPECT_TRUE(still_waiting(returned)) << "unloaded under a queued run";
  gate.open();
  dropper.join();
  EXPECT_TRUE(host_value(got[0]).same_bytes(want));
}

TEST(CpuRunQueue, WithPeersARunIsOnTheCallingThreadAfterEarlierRuns) {
  Small& s = small();
  const Array want = host_value(s.exe->execute(buffers(s.p.inputs))[0]);
  backend::set_collectives(std::make_shared<PeersCollectives>());
  QueueGate gate;
  std::atomic<bool> returned{false};
  bool ready_at_return = false;
  std::vector<backend::Buffer> got;
  std::thread caller([&] {
    got = s.exe->execute(buffers(s.p.inputs));
    ready_at_return = got[0].ready().done();
    returned = true;
  });
  EXPECT_TRUE(still_waiting(returned)) << "ran before the run queued ahead of it";
  gate.open();
  caller.join();
  backend::set_collectives(nullptr);
  EXPECT_TRUE(ready_at_return) << "with peers, execute returned before its run";
  EXPECT_TRUE(host_value(got[0]).same_bytes(want));
}

// Programs share one scratch arena grown to the largest need: a small program, a large one and
// the small one again each compute what the interpreter computes, and the arena ends as large
// as the large program's.
TEST(CpuBackend, ProgramsShareOneArenaGrownToTheLargest) {
  auto chain = [](const std::string& name, int64_t n) {
    TestProgram p(name, static_cast<uint64_t>(n));
    auto dot = [&](NodeId a, NodeId b) {
      return p.op(Op::dot_general, {a, b},
                  {{"lhs_batch", Ints{}},
                   {"rhs_batch", Ints{}},
                   {"lhs_contract", Ints{1}},
                   {"rhs_contract", Ints{0}}});
    };
    NodeId a = p.random(DType::f32, {n, n}, -1, 1);
    // exp(a·a) lives in the arena between the two products.
    p.out(dot(p.op(Op::exp, {dot(a, a)}), a), "exp(a a) a", kLoose);
    return p;
  };
  TestProgram small_chain = chain("small_chain", 8), large_chain = chain("large_chain", 96);
  check(small_chain);
  check(large_chain);
  check(small_chain);
  EXPECT_GE(cpu::shared_arena_bytes(), 96 * 96 * 4);
}

// A program's arena comes from the host's allocator, on 2 MB pages: its first run takes no page
// fault per 4 KB of scratch, as the first gpt2-s step took ~100 thousand. (Populating 4 KB pages
// counts a fault per page too, so without huge pages the count proves nothing.)
TEST(CpuBackend, AFreshArenaIsOnHugePagesBeforeTheProgramRuns) {
  if (!testing_support::huge_pages_on_request())
    GTEST_SKIP() << "no transparent huge pages on request here";
  (void)small().exe->execute(buffers(small().p.inputs));  // the thread team exists before
  const int64_t cols = 1024;
  const int64_t rows = std::max<int64_t>(4096, cpu::shared_arena_bytes() / (cols * 4) + 1024);
  TestProgram p("arena_pages");
  // exp(x) lives in the arena: two reductions over different axes read it.
  const NodeId e = p.op(Op::exp, {p.param(Array(DType::f32, {rows, cols}))});
  p.out(p.op(Op::reduce_sum, {e}, reduce_attrs({0}, 0)), "column sums");
  p.out(p.op(Op::reduce_max, {e}, reduce_attrs({1}, 0)), "row maxima");
  const std::unique_ptr<backend::Executable> exe = cpu_client().compile(p.g, {});
  const std::vector<backend::Buffer> in = buffers(p.inputs);
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const std::vector<backend::Buffer> out = exe->execute(in);
  out[1].ready().wait();  // the run may finish after execute returns
  getrusage(RUSAGE_SELF, &after);
  ASSERT_GE(cpu::shared_arena_bytes(), rows * cols * 4) << "exp(x) is not in the arena";
  EXPECT_EQ(host_value(out[1]).get_f64(0), 1.0);
  const int64_t pages = rows * cols * 4 / 4096;
  EXPECT_LT(after.ru_minflt - before.ru_minflt, pages / 4)
      << "page faults in the first run over " << pages << " pages of arena";
}

// ---- the compiler: its own message, the kept source, the work directory ----------------------

std::string compile_error(const backend::CompileOptions& options) {
  try {
    TestProgram p("broken");
    p.out(p.op(Op::exp, {p.random(DType::f32, {3})}), "exp");
    cpu_client().compile(p.g, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string kept_source(const std::string& message) {
  const std::string tag = "source kept at ";
  const size_t at = message.find(tag);
  if (at == std::string::npos) return "";
  const size_t end = message.find_first_of(":\n )", at + tag.size());
  return message.substr(at + tag.size(), end - at - tag.size());
}

TEST(CpuBackend, CompilerFailureShowsItsMessageAndKeepsTheSource) {
  cpu::Settings s;
  s.flags = {"-O2", "-fno-such-option-keel"};
  std::string msg = compile_error(cpu::with_settings({}, s));
  EXPECT_THAT(msg, HasSubstr("[backend.cpu] c++ failed for 'broken' (exit 1); source kept at "));
  EXPECT_THAT(msg, HasSubstr("-fno-such-option-keel"));  // the compiler's own words
  const std::string src = kept_source(msg);
  ASSERT_TRUE(fs::exists(src)) << msg;
  EXPECT_THAT(fs::path(src).filename().string(), "broken.cpp");
  std::ifstream f(src);
  std::string first;
  std::getline(f, first);
  EXPECT_THAT(first, HasSubstr("Generated by keel"));
  fs::remove_all(fs::path(src).parent_path());

  s = {};
  s.compiler = "false";
  msg = compile_error(cpu::with_settings({}, s));
  EXPECT_THAT(msg, HasSubstr("false failed for 'broken' (exit 1)"));
  EXPECT_THAT(msg, HasSubstr("(the compiler printed nothing)"));
  EXPECT_TRUE(fs::exists(kept_source(msg)));
  fs::remove_all(fs::path(kept_source(msg)).parent_path());

  s.compiler = "keel-no-such-compiler";
  msg = compile_error(cpu::with_settings({}, s));
  EXPECT_THAT(msg, HasSubstr("cannot start 'keel-no-such-compiler'"));
  EXPECT_TRUE(fs::exists(kept_source(msg)));
  fs::remove_all(fs::path(kept_source(msg)).parent_path());
}

// Whether process `pid` still runs: gone, or a zombie nobody has reaped yet, is not running.
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

// A compiler that hangs (here a script whose child sleeps, like a driver waiting on cc1plus)
// meets cpu.compile_timeout_s: the error comes near the deadline, names the deadline and
// the whole command, and neither the driver nor its child is left running.
TEST(CpuBackend, HungCompilerIsKilledWithItsChildrenAtTheDeadline) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("keel-hung-cc-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string script = (dir / "slow-c++").string(), pids = (dir / "pids").string();
  std::ofstream(script) << "#!/bin/sh\nsleep 60 &\necho $$ $! > " << pids << "\nwait\n";
  fs::permissions(script, fs::perms::owner_all);
  cpu::Settings s;
  s.compiler = script;
  s.compile_timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = compile_error(cpu::with_settings({}, s));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 4.0);
  EXPECT_THAT(msg, HasSubstr("[backend.cpu] the compiler did not finish 'broken' within 1 s "
                             "(cpu.compile_timeout_s); killed it and its process group; "
                             "source kept at "));
  EXPECT_THAT(msg, HasSubstr("; command: " + script + " -std=c++17 -fPIC"));
  EXPECT_THAT(msg, HasSubstr(" -shared -o "));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  pid_t driver = 0, child = 0;
  std::ifstream(pids) >> driver >> child;
  ASSERT_GT(driver, 0);
  ASSERT_GT(child, 0);
  for (int i = 0; i < 200 && (running(driver) || running(child)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(running(driver));
  EXPECT_FALSE(running(child)) << "the compiler's child outlived the deadline";
  fs::remove_all(fs::path(kept_source(msg)).parent_path());
  fs::remove_all(dir);
}

TEST(CpuBackend, WorkDirIsTemporaryUnlessNamed) {
  const fs::path root = fs::temp_directory_path() / fmt::format("keel-cpu-test-{}", ::getpid());
  fs::remove_all(root);
  fs::create_directories(root / "tmp");
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", (root / "tmp").c_str(), 1);
  TestProgram p("named");
  p.out(p.op(Op::neg, {p.random(DType::f32, {3})}), "neg");
  cpu_client().compile(p.g, {});
  EXPECT_TRUE(fs::is_empty(root / "tmp")) << "a successful compile leaves no temporary files";
  backend::CompileOptions o;
  o.work_dir = (root / "work").string();
  o.passes.dump_dir = (root / "dump").string();
  cpu_client().compile(p.g, o);
  if (old)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  int sources = 0, objects = 0;
  for (const auto& e : fs::directory_iterator(root / "work")) {
    sources += e.path().extension() == ".cpp";
    objects += e.path().extension() == ".so";
  }
  EXPECT_EQ(sources, 1);
  EXPECT_EQ(objects, 1);
  EXPECT_TRUE(fs::exists(root / "dump" / "named.cpp"));
  EXPECT_TRUE(fs::exists(root / "dump" / "named.8.fuse.txt"));
  fs::remove_all(root);
}

TEST(CpuBackend, FingerprintCoversCompilerFlagsAndPasses) {
  const cpu::Settings defaults;
  const backend::CompileOptions a = cpu::with_settings({}, defaults);
  backend::CompileOptions b = a;
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  cpu::Settings s;
  s.compile_timeout_s = 5;  // a deadline changes no code
  b = cpu::with_settings({}, s);
  b.work_dir = "/somewhere";
  b.passes.dump_dir = "/elsewhere";
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  s = {};
  s.flags.push_back("-O3");
  EXPECT_NE(a.fingerprint(), cpu::with_settings({}, s).fingerprint());
  s = {};
  s.compiler = "clang++";
  EXPECT_NE(a.fingerprint(), cpu::with_settings({}, s).fingerprint());
  b = a;
  b.passes.disabled = {"cse"};
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  s = {};
  s.flags = {"-O2 -march=native", "-fopenmp"};  // flags are items, not a joined string
  EXPECT_NE(a.fingerprint(), cpu::with_settings({}, s).fingerprint());
  EXPECT_THAT(a.fingerprint(), HasSubstr("\"-march=native\""));
  // The key text is what it was before the settings moved into the CPU backend.
  EXPECT_EQ(a.fingerprint(),
            "compiler=\"c++\";flags=[\"-O2\",\"-march=native\",\"-mprefer-vector-width=512\","
            "\"-fopenmp\"];" +
                a.passes.fingerprint() + ";matmul_precision=f32");
  // Options without settings are the CPU's defaults when compiled, and another backend's are
  // an error, not silently the defaults.
  EXPECT_EQ(cpu::settings_of({}).compiler, "c++");
  struct Other final : backend::BackendSettings {
    std::string fingerprint() const override { return "other"; }
  };
  backend::CompileOptions other;
  other.backend_settings = std::make_shared<Other>();
  EXPECT_THROW(cpu::settings_of(other), Error);
}

TEST(CpuBackend, MemoryStatsAreTheHostsAndDevicesAreCpu0) {
  auto devices = cpu_client().devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].str(), "cpu:0");
  EXPECT_EQ(cpu_client().platform(), "cpu");
  const backend::MemoryStats before = cpu_client().memory_stats(devices[0]);
  std::vector<char> block(64 << 20, 1);  // touched, so resident
  const backend::MemoryStats after = cpu_client().memory_stats(devices[0]);
  EXPECT_GT(before.bytes_in_use, 1 << 20);
  EXPECT_GE(after.bytes_in_use, before.bytes_in_use + (60 << 20)) << static_cast<int>(block[12345]);
  EXPECT_GE(after.peak_bytes_in_use, after.bytes_in_use);
  EXPECT_GT(after.bytes_limit, after.peak_bytes_in_use);
  EXPECT_THROW(cpu_client().memory_stats({1, "cpu"}), Error);
}

// ---- the generated source itself -------------------------------------------------------------

// Generated loops contract a multiply-add into one FMA where the CPU has one: a·b + c here
// rounds to 0 in two steps but is 2^-24 exactly when rounded once.
TEST(CpuCodegen, ContractsMultiplyAddsIntoOneRounding) {
  if (!__builtin_cpu_supports("fma")) GTEST_SKIP() << "this CPU has no FMA";
  TestProgram p("fma");
  const double a = 1 + std::ldexp(1.0, -12), c = -(1 + std::ldexp(1.0, -11));
  NodeId x = p.values(DType::f32, std::vector<double>(64, a));
  NodeId z = p.values(DType::f32, std::vector<double>(64, c));
  p.out(p.op(Op::add, {p.op(Op::mul, {x, x}), z}), "a*a + c");
  const std::vector<Array> got = check(p);
  EXPECT_EQ(got[0].get_f64(0), std::ldexp(1.0, -24));
  EXPECT_EQ(got[0].get_f64(63), std::ldexp(1.0, -24));
}

TEST(CpuCodegen, FusesSoftmaxAndWritesExactConstants) {
  TestProgram p("softmax_src");
  NodeId x = p.random(DType::f32, {64, 600});
  p.out(p.op(Op::add, {softmax(p, x, 1), p.g.add_constant(Array::scalar(0.1))}), "softmax");
  p.out(p.op(Op::max, {x, p.g.add_constant(Array::scalar(kNaN))}), "nan");
  const std::string src = cpu::generate_source(cpu::lower(p.g)).text;
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = src.find(needle); at != std::string::npos; at = src.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("(reduction)"), 2u) << src;     // max, sum
  EXPECT_EQ(count("(loop)"), 3u) << src;          // sub+exp (stored: div reads it), div+add, max
  EXPECT_EQ(count("keel_view x"), 0u) << src;     // no kernel calls (they pass views): all loops
  EXPECT_EQ(count("0x1.99999ap-4f"), 1u) << src;  // 0.1f exactly
  EXPECT_EQ(count("__builtin_bit_cast(float, 0x7fc00000u)"), 1u) << src;
  EXPECT_EQ(count("#pragma omp for\n"), 4u) << src;       // 38400 elements: all share work,
  EXPECT_EQ(count("#pragma omp for simd\n"), 1u) << src;  // the flat loop in one
  EXPECT_EQ(count("#pragma omp parallel\n"), 1u) << src;  // in one team: five units, one region
  EXPECT_EQ(count("#pragma omp parallel for"), 0u) << src;
  EXPECT_EQ(count("float lane[16] = {}, blk[16] = {};"), 1u)
      << src;  // the row sum: float lanes, no double
  EXPECT_EQ(count("double a"), 0u) << src;
  EXPECT_THAT(src, ::testing::Not(HasSubstr("#include \"")));  // only standard headers
  // and of those only the ABI's <stdint.h>: parsing <cmath> and <cstring> was a sixth of a
  // small program's compile. exp is the builtin <cmath>'s float overload calls.
  EXPECT_EQ(count("#include <"), 1u) << src;
  EXPECT_EQ(count("#include <stdint.h>"), 1u) << src;
  EXPECT_EQ(count("keel_exp("), 1u) << src;
  EXPECT_EQ(count("std::"), 0u) << src;
}

// concat_in_place nests: a concat of a concat (through a reshape) of a concat, every operand
// produced by a loop, is stored where the outermost join puts it; no concat moves a byte and
// the values match the reference.
TEST(CpuBackend, NestedConcatsAreWrittenInPlace) {
  TestProgram p("nested_concat", 5);
  const int64_t B = 2, T = 3, H = 2, D = 4;
  const NodeId x = p.random(DType::f32, {B, T, H, D});
  const NodeId z = p.random(DType::f32, {B, T, H, 3});
  const NodeId y = p.random(DType::f32, {B, T, 5});
  const NodeId innermost =
      p.op(Op::concat, {p.op(Op::exp, {x}), p.op(Op::tanh, {x})}, {{"axis", int64_t{3}}});
  const NodeId middle =
      p.op(Op::concat, {innermost, p.op(Op::sigmoid, {z})}, {{"axis", int64_t{3}}});  // 2D + 3
  const NodeId flat = p.op(Op::reshape, {middle}, {{"shape", Ints{B, T, H * (2 * D + 3)}}});
  const NodeId outer = p.op(Op::concat, {p.op(Op::neg, {y}), flat}, {{"axis", int64_t{2}}});
  p.out(p.op(Op::sin, {outer}), "sin of nested joins");
  const std::string src =
      testing_support::shared_units_inlined(cpu::generate_source(cpu::lower(p.g)).text);
  size_t in_place = 0;
  for (size_t at = src.find("every operand was written in place"); at != std::string::npos;
       at = src.find("every operand was written in place", at + 1)) {
    ++in_place;
  }
  EXPECT_EQ(in_place, 3u) << src;
  EXPECT_THAT(src, ::testing::Not(HasSubstr("k->concat(")));
  check(p);
}

// Units of the same code on other buffers call one shared function, passing their buffers and
// arena scratch: the tanh-of-exp loops of two inputs share one (a third of another shape has its
// own), and so do the column sums of two wide inputs, whose partial sums lie in the arena. The
// results are still each its own input's.
TEST(CpuBackend, UnitsOfTheSameCodeShareOneFunction) {
  TestProgram p("shared_units", 7);
  const NodeId x = p.random(DType::f32, {4, 5});
  const NodeId y = p.random(DType::f32, {4, 5});
  const NodeId z = p.random(DType::f32, {3, 7});
  for (NodeId in : {x, y, z}) {
    p.out(p.op(Op::tanh, {p.op(Op::exp, {in})}), "tanh of exp");
  }
  for (int i = 0; i < 2; ++i) {
    const NodeId wide = p.random(DType::f32, {128, 384});
    p.out(p.op(Op::reduce_sum, {wide}, reduce_attrs({0}, 0)), "column sums", kLoose);
  }
  const std::string src = cpu::generate_source(cpu::lower(p.g)).text;
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = src.find(needle); at != std::string::npos; at = src.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("__attribute__((noinline)) void unit"), 5u) << src;
  EXPECT_EQ(count("__attribute__((noinline)) void shared"), 3u) << src;
  EXPECT_EQ(count("  shared0(k, in, out, A"), 2u) << src;
  EXPECT_EQ(count("  shared2(k, in, out, A"), 2u) << src;
  EXPECT_EQ(count(", char* a_"), 1u) << src;  // the partial sums' scratch is a parameter
  check(p);
}

// Only a whole "A + <offset>" becomes a parameter: in "A + 8 * i" the offset is not 8.
TEST(CpuBackend, SharedUnitsTakeOnlyWholeArenaAddresses) {
  std::vector<std::string> offsets;
  EXPECT_EQ(cpu::gen::arena_addresses_named(
                "f(A + 64); g(A + 8 * i, A + 8[i], XA + 4); h(A + 64, A + 128 + i);", offsets),
            "f(a_0); g(A + 8 * i, A + 8[i], XA + 4); h(a_0, a_1 + i);");
  EXPECT_EQ(offsets, (std::vector<std::string>{"64", "128"}));
}

// An attention and its log-sum-exp rows in one kernel call (the pair a scan body saves): the
// call reads v, which only the attention reads, and v is a view of a wider value.
TEST(CpuBackend, AnAttentionPairedWithItsLogSumExpReadsEveryOperand) {
  TestProgram p("attention_pair", 6);
  const int64_t B = 2, H = 4, KV = 2, T = 5, D = 4;
  const NodeId q = p.random(DType::f32, {B, H, T, D});
  const NodeId kv = p.random(DType::f32, {B, KV, T, 2 * D});
  auto half = [&](int64_t from) {
    return p.op(Op::slice, {kv},
                {{"start", Ints{0, 0, 0, from}},
                 {"limit", Ints{B, KV, T, from + D}},
                 {"stride", Ints{1, 1, 1, 1}}});
  };
  const NodeId k = half(0), v = half(D);
  const Attrs scale{{"scale", 0.5}};
  p.out(p.op(Op::attention, {q, k, v}, scale), "attention");
  p.out(p.op(Op::attention_lse, {q, k}, scale), "its log-sum-exp");
  const passes::Lowered lowered = cpu::lower(p.g);
  const std::string src = cpu::generate_source(lowered).text;
  EXPECT_THAT(src, HasSubstr("and, in the same call:")) << src;
  check(p);
  // The pairing is the fusion pass's (Target::shares_call): one group, both nodes its outputs.
  auto attention_groups = [](const passes::Lowered& l) {
    std::vector<std::vector<Op>> calls;
    for (const passes::FusionGroup& grp : l.fusion.groups) {
      std::vector<Op> ops;
      for (NodeId id : grp.nodes) ops.push_back(l.graph.node(id).op);
      if (ops.front() == Op::attention || ops.front() == Op::attention_lse) {
        EXPECT_EQ(grp.outputs, grp.nodes);
        calls.push_back(ops);
      }
    }
    return calls;
  };
  EXPECT_EQ(attention_groups(lowered),
            (std::vector<std::vector<Op>>{{Op::attention_lse, Op::attention}}));
  passes::PassOptions unfused;
  unfused.disabled = {"fuse"};
  EXPECT_EQ(attention_groups(cpu::lower(p.g, unfused)),
            (std::vector<std::vector<Op>>{{Op::attention_lse, Op::attention}}));
  EXPECT_EQ(attention_groups(passes::lower(p.g)),  // the default target shares no call
            (std::vector<std::vector<Op>>{{Op::attention_lse}, {Op::attention}}));
}

// Layout ops folded into their readers (passes::fold_layout): attention-style head splits (slice,
// reshape, transpose) read by dot_general and by loops, a broadcast read by a reduction, a
// strided slice, bf16 and integer matmuls over strided views, attention over head slices, a
// contiguous reshape read by a kernel, and a reshape of a transpose (not a view: copied). Values
// match the reference, the
// generated code calls only the one copy it must, and a donated parameter read through a
// transposed view in its own update is not written in place.
TEST(CpuBackend, FoldedLayoutOpsMatchTheReferenceWithoutCopies) {
  TestProgram p("folded_layout", 11);
  const int64_t B = 2, T = 8, H = 2, D = 4;
  const NodeId qkv = p.random(DType::f32, {B, T, 3 * H * D});
  auto heads = [&](int64_t part) {
    const NodeId s = p.op(Op::slice, {qkv},
                          {{"start", Ints{0, 0, part * H * D}},
                           {"limit", Ints{B, T, (part + 1) * H * D}},
                           {"stride", Ints{1, 1, 1}}});
    const NodeId r = p.op(Op::reshape, {s}, {{"shape", Ints{B, T, H, D}}});
    return p.op(Op::transpose, {r}, {{"perm", Ints{0, 2, 1, 3}}});  // [B, H, T, D]
  };
  const NodeId q = heads(0), k = heads(1), v = heads(2);
  const Attrs qk = {{"lhs_batch", Ints{0, 1}},
                    {"rhs_batch", Ints{0, 1}},
                    {"lhs_contract", Ints{3}},
                    {"rhs_contract", Ints{3}}};
  const NodeId scores = p.op(Op::dot_general, {q, k}, qk);  // [B, H, T, T]
  p.out(scores, "q k^T over strided heads", kLoose);
  const Attrs pv = {{"lhs_batch", Ints{0, 1}},
                    {"rhs_batch", Ints{0, 1}},
                    {"lhs_contract", Ints{3}},
                    {"rhs_contract", Ints{2}}};
  p.out(p.op(Op::dot_general, {p.op(Op::tanh, {scores}), v}, pv), "p v", kLoose);
  p.out(p.op(Op::mul, {q, p.op(Op::exp, {k})}), "loop over two strided views");
  p.out(p.op(Op::reduce_sum, {v}, reduce_attrs({2}, 0)), "sum over a strided axis", kLoose);
  // The reduce-gradient pattern: a row statistic broadcast back over the row.
  const NodeId x = p.random(DType::f32, {B, T, 24});
  const NodeId row = p.op(Op::reduce_sum, {x}, reduce_attrs({2}, 1));  // [B, T, 1]
  const NodeId wide = p.op(Op::broadcast, {row}, {{"shape", Ints{B, T, 24}}});
  p.out(p.op(Op::reduce_max, {p.op(Op::mul, {wide, x})}, reduce_attrs({1}, 0)),
        "reduction over a broadcast view", kLoose);
  const NodeId every_other =
      p.op(Op::slice, {x},
           {{"start", Ints{0, 1, 0}}, {"limit", Ints{B, T, 24}}, {"stride", Ints{1, 2, 3}}});
  p.out(p.op(Op::neg, {every_other}), "strided slice");
  // bf16 and integer matmuls take strided views too (copied row-major inside the kernel).
  const NodeId qb = p.op(Op::cast, {qkv}, {{"dtype", DType::bf16}});
  const NodeId qbt = p.op(Op::transpose, {qb}, {{"perm", Ints{0, 2, 1}}});  // [B, 24, T]
  const Attrs batched = {{"lhs_batch", Ints{0}},
                         {"rhs_batch", Ints{0}},
                         {"lhs_contract", Ints{2}},
                         {"rhs_contract", Ints{1}}};
  p.out(p.op(Op::cast, {p.op(Op::dot_general, {qbt, qb}, batched)}, {{"dtype", DType::f32}}),
        "bf16 matmul of a transposed view", kBF16);
  const NodeId xi = p.random(DType::i32, {B, T, 5}, -9, 9);
  const NodeId xit = p.op(Op::transpose, {xi}, {{"perm", Ints{0, 2, 1}}});
  p.out(p.op(Op::dot_general, {xit, xi}, batched), "i32 matmul of a transposed view");
  // A contiguous reshape feeds a kernel in place; a reshape of a transpose must be copied.
  const NodeId flat = p.op(Op::reshape, {x}, {{"shape", Ints{B * T * 24}}});
  p.out(p.op(Op::cumsum, {flat}, {{"axis", int64_t{0}}, {"reverse", int64_t{0}}}),
        "kernel reads a contiguous view", kLoose);
  const NodeId mixed = p.op(Op::reshape, {q}, {{"shape", Ints{B, H * T * D}}});
  p.out(p.op(Op::exp, {mixed}), "reshape of a transposed view");
  p.out(p.op(Op::concat, {k, v}, {{"axis", int64_t{3}}}), "concat of two strided views");
  // Attention in layout bthd reads its heads where the projection put them; an operand whose
  // rows are not contiguous (T and D swapped) is copied first.
  auto rows = [&](int64_t part) {
    const NodeId s = p.op(Op::slice, {qkv},
                          {{"start", Ints{0, 0, part * H * D}},
                           {"limit", Ints{B, T, (part + 1) * H * D}},
                           {"stride", Ints{1, 1, 1}}});
    return p.op(Op::reshape, {s}, {{"shape", Ints{B, T, H, D}}});  // [B, T, H, D]
  };
  const Attrs bthd = {{"scale", 0.5}, {"layout", std::string("bthd")}};
  p.out(p.op(Op::attention, {rows(0), rows(1), rows(2)}, bthd),
        "bthd attention over heads in place", kLoose);
  const NodeId qt = p.op(Op::transpose, {q}, {{"perm", Ints{0, 1, 3, 2}}});  // [B, H, D, T]
  p.out(p.op(Op::attention, {qt, qt, qt}, {{"scale", 0.5}}), "attention over a copied transpose",
        kLoose);
  // A donated update that reads its own parameter transposed: scratch, then a copy.
  const NodeId w = p.random(DType::f32, {16, 16});
  const NodeId wt = p.op(Op::transpose, {w}, {{"perm", Ints{1, 0}}});
  p.out(p.op(Op::add, {w, p.op(Op::mul, {wt, p.g.add_constant(Array::scalar(0.5))})}),
        "w + w^T / 2, donated");
  p.g.set_output_alias(p.checks.size() - 1, static_cast<int32_t>(p.g.params().size() - 1));
  ASSERT_TRUE(verify_problems(p.g).empty()) << verify_problems(p.g).front();
  const passes::Lowered low = cpu::lower(p.g);
  const std::string src = cpu::generate_source(low).text;
  auto calls = [&](const std::string& fn) {
    size_t n = 0;
    for (size_t at = src.find("k->" + fn + "("); at != std::string::npos;
         at = src.find("k->" + fn + "(", at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(calls("slice"), 0u);
  EXPECT_EQ(calls("broadcast"), 0u);
  EXPECT_EQ(calls("transpose") + calls("copy"), 2u)
      << "only the reshape of a transposed view and the attention rows that are not contiguous";
  EXPECT_THAT(src, HasSubstr("__builtin_memcpy(const_cast<void*>(in["));  // w: not in place
  std::unique_ptr<backend::Executable> exe = cpu_client().compile(p.g, {});
  std::vector<Array> copies;
  for (const Array& a : p.inputs) copies.push_back(a.clone());
  const std::vector<Array> want = ref::interpret(p.g, copies);
  std::vector<Array> inputs = p.inputs;
  std::vector<backend::Buffer> got = exe->execute(buffers(inputs));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(difference(host_value(got[i]), want[i], p.checks[i].second), "") << p.checks[i].first;
  }
  // With folding off, the same program calls copy kernels and computes the same values.
  backend::CompileOptions off;
  off.passes.disabled = {"fold_layout"};
  const std::string copied = cpu::generate_source(cpu::lower(p.g, off.passes)).text;
  EXPECT_THAT(copied, HasSubstr("k->slice("));
  EXPECT_THAT(copied, HasSubstr("k->broadcast("));
}

// Donation: outputs aliased to parameters are written into the arguments' storage and returned
// as it. An AdamW-like update is computed in place (one pointer per buffer, no copy); a matmul
// that reads its own parameter goes through scratch and a copy at the end; a swap, an identity,
// an undonated copy of a donated parameter (taken before anything overwrites it) and a repeat
// all hold their values. Two calls in a row, checked against the reference on copies.
TEST(CpuBackend, DonatedOutputsAreWrittenIntoTheirArguments) {
  TestProgram p("donation", 5);
  const NodeId w = p.random(DType::f32, {4096}), m = p.random(DType::f32, {4096});
  const NodeId g = p.random(DType::f32, {4096}), sq = p.random(DType::f32, {8, 8});
  const NodeId a = p.random(DType::f32, {3}), b = p.random(DType::f32, {3});
  const NodeId same = p.random(DType::f32, {5});
  auto k = [&](double v) { return p.g.add_constant(Array::scalar(v)); };
  const NodeId m2 = p.op(Op::add, {p.op(Op::mul, {m, k(0.9)}), p.op(Op::mul, {g, k(0.1)})});
  const NodeId w2 = p.op(Op::sub, {w, p.op(Op::mul, {m2, p.op(Op::mul, {w, k(0.01)})})});
  p.out(w2, "w");  // 0 -> w, in place
  p.out(m2, "m");  // 1 -> m, in place
  const Attrs matmul = {{"lhs_batch", Ints{}},
                        {"rhs_batch", Ints{}},
                        {"lhs_contract", Ints{1}},
                        {"rhs_contract", Ints{0}}};
  p.out(p.op(Op::dot_general, {sq, sq}, matmul), "sq", kLoose);  // 2 -> sq, copied
  p.out(b, "swap a");                                            // 3 -> a
  p.out(a, "swap b");                                            // 4 -> b
  p.out(same, "identity");                                       // 5 -> same
  p.out(w, "old w");                                             // 6: undonated
  p.out(m2, "m again");                                          // 7: a repeat
  // Parameters: w 0, m 1, g 2, sq 3, a 4, b 5, same 6.
  const std::vector<int32_t> into = {0, 1, 3, 4, 5, 6};
  for (size_t i = 0; i < into.size(); ++i) p.g.set_output_alias(i, into[i]);
  ASSERT_TRUE(verify_problems(p.g).empty()) << verify_problems(p.g).front();
  const std::string src = cpu::generate_source(cpu::lower(p.g)).text;
  EXPECT_THAT(src, HasSubstr("__builtin_memcpy(const_cast<void*>(in[3])"));   // the matmul's
  EXPECT_THAT(src, ::testing::Not(HasSubstr("const_cast<void*>(in[0]), ")));  // w: in place
  EXPECT_THAT(src, ::testing::Not(HasSubstr("const_cast<void*>(in[1]), ")));  // m: in place
  std::unique_ptr<backend::Executable> exe = cpu_client().compile(p.g, {});
  std::vector<Array> inputs = p.inputs;
  for (int call = 0; call < 2; ++call) {
    std::vector<Array> copies;
    for (const Array& x : inputs) copies.push_back(x.clone());
    const std::vector<Array> want = ref::interpret(p.g, copies);
    std::vector<const std::byte*> storage;
    for (const Array& x : inputs) storage.push_back(x.data());
    std::vector<backend::Buffer> got = exe->execute(buffers(inputs));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(difference(host_value(got[i]), want[i], kLoose), "") << p.checks[i].first;
      const int32_t alias = p.g.output_alias(i);
      if (alias >= 0) {
        EXPECT_EQ(got[i].address(), storage[static_cast<size_t>(alias)]) << p.checks[i].first;
        EXPECT_EQ(difference(inputs[static_cast<size_t>(alias)], want[i], kLoose), "");
      }
    }
    for (size_t i = 0; i < got.size(); ++i) {
      const int32_t alias = p.g.output_alias(i);
      if (alias >= 0) inputs[static_cast<size_t>(alias)] = host_value(got[i]);
    }
  }
  // A donated buffer that is also another argument would change under the program: refused.
  std::vector<Array> twice = inputs;
  twice[2] = twice[0];
  try {
    exe->execute(buffers(twice));
    ADD_FAILURE() << "a donated buffer passed twice was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("input 0 is donated (written in place) and "
                                                 "input 2 is the same buffer"));
  }
  // The reference backend honours the same aliases.
  std::unique_ptr<backend::Executable> ref_exe = ref::make_ref_client()->compile(p.g, {});
  std::vector<Array> copies;
  for (const Array& x : inputs) copies.push_back(x.clone());
  const std::vector<Array> want = ref::interpret(p.g, copies);
  std::vector<backend::Buffer> got = ref_exe->execute(buffers(inputs));
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(difference(host_value(got[i]), want[i], kF32), "") << "ref " << p.checks[i].first;
    if (p.g.output_alias(i) >= 0) {
      EXPECT_EQ(got[i].address(), inputs[static_cast<size_t>(p.g.output_alias(i))].data());
    }
  }
}

// The predicted peak includes what kernel calls allocate for themselves: an operand permuted
// for the GEMM (contracting dims that do not collapse into one stride) and bf16 operands
// widened to f32, the largest call counted once.
TEST(CpuCodegen, PredictedPeakIncludesKernelScratch) {
  auto scratch_of = [](TestProgram& p) {
    const passes::Lowered lowered = cpu::lower(p.g);
    const cpu::GeneratedSource src = cpu::generate_source(lowered);
    std::string defs;
    cpu::gen::ProgramMemory memory;
    cpu::gen::SharedUnits shared;
    cpu::gen::emit_program(lowered, "", defs, memory, shared);
    return src.predicted_peak_bytes - lowered.memory.predicted_peak_bytes - memory.scratch_bytes;
  };
  auto dot = [](TestProgram& p, NodeId a, NodeId b, Ints lc, Ints rc) {
    return p.op(
        Op::dot_general, {a, b},
        {{"lhs_batch", Ints{}}, {"rhs_batch", Ints{}}, {"lhs_contract", lc}, {"rhs_contract", rc}});
  };
  TestProgram permuted("permuted");
  permuted.out(dot(permuted, permuted.random(DType::f32, {4, 3, 5}),
                   permuted.random(DType::f32, {4, 5, 7}), {0, 2}, {0, 1}),
               "dot", kLoose);
  EXPECT_EQ(scratch_of(permuted), 4 * 3 * 5 * 4);  // the lhs, permuted
  TestProgram widened("widened");
  widened.out(dot(widened, widened.random(DType::bf16, {8, 16}),
                  widened.random(DType::bf16, {16, 4}), {1}, {0}),
              "dot");
  EXPECT_EQ(scratch_of(widened), (8 * 16 + 16 * 4 + 8 * 4) * 4);
  TestProgram plain("plain");
  plain.out(
      dot(plain, plain.random(DType::f32, {8, 16}), plain.random(DType::f32, {16, 4}), {1}, {0}),
      "dot", kLoose);
  EXPECT_EQ(scratch_of(plain), 0);
  check(permuted);
  check(widened);
}

// Plans the fuser does not make today but the contract allows: a broadcast and a reshape of an
// input inside a loop, producers stored from inside a reduction loop, and a group's loop and
// reduction placed where the plan says (groups need not be runs of consecutive nodes).
struct CustomPlan {
  TestProgram p{"custom_plan", 3};
  NodeId x = p.random(DType::f32, {4, 6}), b = p.random(DType::f32, {6}),
         c = p.random(DType::f32, {24});
  NodeId bb = p.op(Op::broadcast, {b}, {{"shape", Ints{4, 6}}});
  NodeId r = p.op(Op::reshape, {c}, {{"shape", Ints{4, 6}}});
  NodeId e = p.op(Op::exp, {b});
  NodeId a = p.op(Op::add, {x, bb});
  NodeId m = p.op(Op::mul, {a, r});
  NodeId s = p.op(Op::add, {m, e});
  NodeId t = p.op(Op::tanh, {a});
  NodeId v = p.op(Op::neg, {e});
  NodeId tv = p.op(Op::mul, {t, v});
  NodeId red = p.op(Op::reduce_sum, {tv}, reduce_attrs({0}, 0));
  NodeId tr = p.op(Op::transpose, {s}, {{"perm", Ints{1, 0}}});
  NodeId etr = p.op(Op::exp, {tr});
  NodeId red2 = p.op(Op::reduce_max, {etr}, reduce_attrs({1}, 0));
  NodeId o = p.op(Op::add, {red, red2});
  passes::FusionPlan f;

  CustomPlan() {
    for (NodeId id : {s, t, v, o}) p.out(id, fmt::format("%{}", id));
    f.group_of.assign(p.g.size(), -1);
  }
  void group(passes::GroupKind kind, std::vector<NodeId> nodes, std::vector<NodeId> outs) {
    for (NodeId id : nodes) f.group_of[id] = static_cast<int32_t>(f.groups.size());
    f.groups.push_back({kind, std::move(nodes), std::move(outs)});
  }
  passes::Lowered lowered() const {
    passes::PassOptions cpu_options;
    cpu_options.target = cpu::lowering_target();
    return passes::Lowered{p.g, f, passes::plan_memory(p.g, f), {}, cpu_options, {}};
  }
};

TEST(CpuCodegen, FollowsPlansBeyondWhatTheFuserMakes) {
  using passes::GroupKind;
  CustomPlan c;
  c.group(GroupKind::Elementwise, {c.e}, {c.e});
  c.group(GroupKind::Elementwise, {c.bb, c.r, c.a, c.m, c.s}, {c.a, c.s});
  c.group(GroupKind::Elementwise, {c.v}, {c.v});
  c.group(GroupKind::Reduction, {c.t, c.tv, c.red}, {c.red});  // t is stored from inside it
  c.group(GroupKind::Single, {c.tr}, {c.tr});
  c.group(GroupKind::Reduction, {c.etr, c.red2}, {c.red2});
  c.group(GroupKind::Elementwise, {c.o}, {c.o});
  const passes::Lowered lowered = c.lowered();
  const std::string src = cpu::generate_source(lowered).text;
  EXPECT_THAT(src, HasSubstr("(kernel): %" + std::to_string(c.tr) + " = transpose"));
  std::unique_ptr<backend::Executable> exe = cpu::compile_lowered(lowered, {});
  const std::vector<Array> want = ref::interpret(c.p.g, c.p.inputs);
  const std::vector<backend::Buffer> got = exe->execute(buffers(c.p.inputs));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(difference(host_value(got[i]), want[i], kF32), "") << c.p.checks[i].first;
}

// A fusion group is one unit of generated code: a group its loop cannot compute (a transpose
// inside a reduction), or one storing values of two shapes, is refused, not split.
TEST(CpuCodegen, RefusesAFusionGroupItsLoopCannotCompute) {
  using passes::GroupKind;
  auto refusal = [](const CustomPlan& c) {
    try {
      (void)cpu::generate_source(c.lowered());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("generated");
  };
  CustomPlan c;
  c.group(GroupKind::Elementwise, {c.e}, {c.e});
  c.group(GroupKind::Elementwise, {c.bb, c.r, c.a, c.m, c.s}, {c.a, c.s});
  c.group(GroupKind::Elementwise, {c.v}, {c.v});
  c.group(GroupKind::Reduction, {c.t, c.tv, c.red}, {c.red});
  CustomPlan two_shapes = c;
  c.group(GroupKind::Reduction, {c.tr, c.etr, c.red2}, {c.red2});
  c.group(GroupKind::Elementwise, {c.o}, {c.o});
  EXPECT_THAT(refusal(c),
              HasSubstr(fmt::format(
                  "[backend.codegen] internal: fusion group 4 holds %{} = transpose", c.tr)));
  EXPECT_THAT(refusal(c), HasSubstr("which a reduction loop cannot compute"));

  two_shapes.f.groups.clear();
  two_shapes.f.group_of.assign(two_shapes.p.g.size(), -1);
  two_shapes.group(GroupKind::Elementwise, {c.bb, c.r, c.e, c.a, c.m, c.s, c.t, c.v},
                   {c.e, c.a, c.s, c.t, c.v});
  two_shapes.group(GroupKind::Reduction, {c.tv, c.red}, {c.red});
  two_shapes.group(GroupKind::Single, {c.tr}, {c.tr});
  two_shapes.group(GroupKind::Reduction, {c.etr, c.red2}, {c.red2});
  two_shapes.group(GroupKind::Elementwise, {c.o}, {c.o});
  EXPECT_THAT(refusal(two_shapes), HasSubstr("internal: fusion group 0 stores %"));
  EXPECT_THAT(refusal(two_shapes), HasSubstr("of two shapes; one loop cannot"));

  // Kernels in one group that cpu::shares_call does not pair: one call could not write both.
  TestProgram k("unshared_call", 1);
  const NodeId x = k.random(DType::f32, {4, 8});
  const Attrs along{{"axis", int64_t{1}}, {"reverse", int64_t{0}}};
  const NodeId first = k.op(Op::cumsum, {x}, along), second = k.op(Op::cumsum, {x}, along);
  k.out(first, "first");
  k.out(second, "second");
  passes::FusionPlan f;
  f.group_of.assign(k.g.size(), -1);
  f.group_of[first] = f.group_of[second] = 0;
  f.groups.push_back({GroupKind::Single, {first, second}, {first, second}});
  passes::PassOptions cpu_options;
  cpu_options.target = cpu::lowering_target();
  try {
    (void)cpu::generate_source({k.g, f, passes::plan_memory(k.g, f), {}, cpu_options, {}});
    ADD_FAILURE() << "a group of two unshared kernels generated code";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr(fmt::format("internal: fusion group 0 puts %{} = cumsum", second)));
    EXPECT_THAT(e.what(), HasSubstr("which cannot compute it"));
  }
}

TEST(CpuCodegen, RejectsKernelOperandsOfRankAboveEight) {
  TestProgram p("rank9");
  NodeId x = p.random(DType::f32, Shape(9, 1));
  p.out(p.op(Op::transpose, {x}, {{"perm", Ints{8, 0, 1, 2, 3, 4, 5, 6, 7}}}), "transpose");
  passes::PassOptions o;
  o.disabled = {"canonicalize"};  // which may drop a transpose of size-1 dims
  EXPECT_THAT(
      [&] { cpu::generate_source(cpu::lower(p.g, o)); },
      ::testing::ThrowsMessage<Error>(HasSubstr("rank 9, but kernels take at most 8 dims")));
}

// The body is generated once and called from a loop: the source for L=2 and L=16 differs only
// in the trip count (and the stacked buffers' sizes in comments and offsets).
TEST(CpuCodegen, ScanBodyIsGeneratedOnceNotUnrolled) {
  auto source = [](int64_t L) {
    Graph g("scanned");
    NodeId h = g.add_param({DType::f32, {2, 3}});
    NodeId ws = g.add_param({DType::f32, {L, 3, 3}});
    NodeId b = g.add_param({DType::f32, {3}});
    g.set_outputs(scan_test::tiny_scan(g, h, ws, b, false));
    return cpu::generate_source(cpu::lower(g)).text;
  };
  const std::string s2 = source(2), s16 = source(16);
  auto lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
  EXPECT_EQ(lines(s2), lines(s16));
  EXPECT_LE(std::max(s2.size(), s16.size()) - std::min(s2.size(), s16.size()), 16u);
  EXPECT_NE(s16.find("constexpr int64_t L = 16;"), std::string::npos);
  // One body function, called from the loop.
  const std::regex body_fn(R"(void s\d+_run\()");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(s16.begin(), s16.end(), body_fn), std::sregex_iterator()),
      1);
}

// Gradients of a scanned program (a plain one and a nested one) on the CPU backend against the
// interpreter, with passes on and off; the executable serializes and loads like any other.
TEST(CpuBackend, ScanGradientsMatchTheReferenceAndSerialize) {
  TestProgram p("scan_grads", 11);
  NodeId h = p.random(DType::f32, {2, 3});
  NodeId ws = p.random(DType::f32, {5, 3, 3}, -1, 1);
  NodeId b = p.random(DType::f32, {3});
  NodeId ws2 = p.random(DType::f32, {2, 3, 3, 3}, -1, 1);
  std::vector<NodeId> r = scan_test::tiny_scan(p.g, h, ws, b, false);
  std::vector<NodeId> q = scan_test::nested_scan(p.g, r[0], ws2, b, true);
  auto sum_all = [&](NodeId x) {
    Ints axes(p.g.node(x).type.shape.size());
    for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
    return p.op(Op::reduce_sum, {p.op(Op::mul, {x, x})}, reduce_attrs(axes, 0));
  };
  p.out(p.op(Op::add, {p.op(Op::add, {sum_all(r[1]), sum_all(q[0])}), sum_all(q[1])}), "loss");
  TestProgram vg("scan_grads_vg");
  vg.g = autodiff::value_and_grad(p.g, 0);
  vg.inputs = p.inputs;
  vg.checks.assign(vg.g.outputs().size(), {"", kLoose});
  for (size_t i = 0; i < vg.checks.size(); ++i) vg.checks[i].first = fmt::format("output {}", i);
  const std::vector<Array> fused = check(vg);
  backend::CompileOptions off;
  off.passes.disabled = {"fuse", "plan_memory", "canonicalize", "cse", "dce"};
  check(vg, off);
  std::unique_ptr<backend::Executable> exe = cpu_client().compile(vg.g, {});
  std::unique_ptr<backend::Executable> loaded = cpu_client().load(exe->serialize());
  const auto got = loaded->execute(buffers(vg.inputs));
  ASSERT_EQ(got.size(), fused.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(host_value(got[i]).same_bytes(fused[i])) << i;
  EXPECT_GT(loaded->predicted_peak_bytes(), 0);
}

// passes.disabled reaches a scan's body: with fuse off the body is generated unfused too (a unit
// function per op), its workspace is planned from that same lowering, and the program still
// computes what the reference interpreter does.
TEST(CpuCodegen, ScanBodiesAreLoweredWithTheProgramsPassOptions) {
  cpu_client();  // loads BLAS
  TestProgram p("scan_pass_options", 5);
  std::vector<NodeId> r =
      scan_test::tiny_scan(p.g, p.random(DType::f32, {2, 3}), p.random(DType::f32, {3, 3, 3}),
                           p.random(DType::f32, {3}), false);
  p.out(r[0], "carry", kLoose);
  p.out(r[1], "ys", kLoose);
  auto body_units = [](const std::string& text) {
    const std::regex def(R"(void s[0-9]+_unit[0-9]+\()");
    return std::distance(std::sregex_iterator(text.begin(), text.end(), def),
                         std::sregex_iterator());
  };
  passes::PassOptions unfused;
  unfused.disabled = {"fuse", "plan_memory"};
  const passes::Lowered fused_low = cpu::lower(p.g), unfused_low = cpu::lower(p.g, unfused);
  EXPECT_GT(body_units(cpu::generate_source(unfused_low).text),
            body_units(cpu::generate_source(fused_low).text));
  for (size_t i = 0; i < fused_low.graph.size(); ++i) {
    if (fused_low.graph.nodes()[i].op != Op::scan) continue;
    const passes::Lowered& fused_body = *fused_low.bodies.at(NodeId(i));
    const passes::Lowered& unfused_body = *unfused_low.bodies.at(NodeId(i));
    EXPECT_GT(passes::scan_workspace_bytes(fused_low.graph.nodes()[i], unfused_body),
              passes::scan_workspace_bytes(fused_low.graph.nodes()[i], fused_body));  // no reuse
  }
  std::unique_ptr<backend::Executable> exe = cpu::compile_lowered(unfused_low, {});
  const std::vector<Array> want = ref::interpret(p.g, p.inputs);
  const std::vector<backend::Buffer> got = exe->execute(buffers(p.inputs));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(difference(host_value(got[i]), want[i], kLoose), "") << p.checks[i].first;
  }
}

// A plan that gives a scan no workspace: codegen places it in its own scratch past the arena.
TEST(CpuCodegen, ScanWithoutAPlannedWorkspaceUsesScratch) {
  cpu_client();  // loads BLAS
  TestProgram p("scan_scratch", 5);
  std::vector<NodeId> r =
      scan_test::tiny_scan(p.g, p.random(DType::f32, {2, 3}), p.random(DType::f32, {3, 3, 3}),
                           p.random(DType::f32, {3}), false);
  p.out(r[0], "carry", kLoose);
  p.out(r[1], "ys", kLoose);
  passes::Lowered lowered = cpu::lower(p.g);
  NodeId scan = -1;
  for (size_t i = 0; i < lowered.graph.size(); ++i) {
    if (lowered.graph.nodes()[i].op == Op::scan) scan = static_cast<NodeId>(i);
  }
  ASSERT_GE(scan, 0);
  lowered.memory.offset[scan] = -1;
  EXPECT_GE(cpu::generate_source(lowered).arena_bytes,
            lowered.memory.arena_bytes +
                passes::scan_workspace_bytes(lowered.graph.node(scan), *lowered.bodies.at(scan)));
  std::unique_ptr<backend::Executable> exe = cpu::compile_lowered(lowered, {});
  const std::vector<Array> want = ref::interpret(p.g, p.inputs);
  const std::vector<backend::Buffer> got = exe->execute(buffers(p.inputs));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(difference(host_value(got[i]), want[i], kLoose), "") << p.checks[i].first;
  }
}

// Code generation follows the plans it is given and no other: a graph lowered for another target
// (whose views the kernels here may not read) is refused, and a scan's body is the one lowered
// with the graph, not lowered again.
TEST(CpuCodegen, FollowsOnlyPlansMadeForTheCpuTargetWithTheirLoweredBodies) {
  TestProgram p("scan_target", 6);
  std::vector<NodeId> r =
      scan_test::tiny_scan(p.g, p.random(DType::f32, {2, 3}), p.random(DType::f32, {3, 3, 3}),
                           p.random(DType::f32, {3}), false);
  p.out(r[0], "carry", kLoose);
  EXPECT_THAT(
      [&] { cpu::generate_source(passes::lower(p.g)); },
      ::testing::ThrowsMessage<Error>(HasSubstr("was lowered for the target 'contiguous' "
                                                "(alignment 64, spare scan carries yes); lower it "
                                                "with cpu::lower")));
  passes::Lowered lowered = cpu::lower(p.g);
  ASSERT_EQ(lowered.bodies.size(), 1u);
  EXPECT_EQ(lowered.options.target.name, "cpu");
  passes::Lowered realigned = lowered;  // the CPU's name, another alignment
  realigned.options.target.alignment = 128;
  EXPECT_THAT(
      [&] { cpu::generate_source(realigned); },
      ::testing::ThrowsMessage<Error>(HasSubstr("(alignment 128, spare scan carries yes)")));
  passes::Lowered unspared = lowered;  // the CPU's name, carries without their spare buffers
  unspared.options.target.scan_spare_carries = false;
  EXPECT_THAT([&] { cpu::generate_source(unspared); },
              ::testing::ThrowsMessage<Error>(HasSubstr("(alignment 64, spare scan carries no)")));
  lowered.bodies.clear();
  EXPECT_THAT([&] { cpu::generate_source(lowered); },
              ::testing::ThrowsMessage<Error>(HasSubstr("has no lowered body")));
}

// The CPU's target: loops, products, copies and concat read any strides; the attention family
// reads views whose rows of head_dim are contiguous (but the flat lse, input 5 of the gradients,
// and the doc ids), and all but attention_lse write them; other kernels take no strided view.
TEST(CpuTarget, NamesWhichKernelsReadAndWriteStridedViews) {
  auto node = [](Op op) {
    Node n;
    n.op = op;
    return n;
  };
  const passes::View rows{0, 0, {96, 1}, false}, columns{0, 0, {1, 96}, false};
  for (const Op op : {Op::add, Op::reduce_sum, Op::dot_general, Op::transpose, Op::concat}) {
    EXPECT_TRUE(cpu::reads_view(node(op), 0, columns)) << op_name(op);
  }
  for (const Op op : {Op::attention, Op::attention_dq, Op::attention_dk, Op::attention_dv}) {
    EXPECT_TRUE(cpu::reads_view(node(op), 0, rows)) << op_name(op);
    EXPECT_FALSE(cpu::reads_view(node(op), 0, columns)) << op_name(op);
    EXPECT_TRUE(cpu::writes_view(node(op), rows)) << op_name(op);
    EXPECT_FALSE(cpu::writes_view(node(op), columns)) << op_name(op);
  }
  EXPECT_TRUE(cpu::reads_view(node(Op::attention_dq), 4, rows));   // dout
  EXPECT_FALSE(cpu::reads_view(node(Op::attention_dq), 5, rows));  // lse is read flat
  EXPECT_FALSE(cpu::reads_view(node(Op::attention), 3, rows));     // the doc ids, flat
  EXPECT_FALSE(cpu::reads_view(node(Op::attention_dq), 6, rows));
  EXPECT_TRUE(cpu::reads_view(node(Op::attention_lse), 1, rows));  // k
  EXPECT_FALSE(cpu::writes_view(node(Op::attention_lse), rows));   // its [B,H,T] is stored whole
  EXPECT_FALSE(cpu::reads_view(node(Op::cumsum), 0, rows));
  EXPECT_FALSE(cpu::writes_view(node(Op::cumsum), rows));
  EXPECT_FALSE(cpu::writes_view(node(Op::add), rows));  // a loop stores through its own group
  const passes::Target& t = cpu::lowering_target();
  EXPECT_EQ(t.name, "cpu");
  EXPECT_EQ(t.alignment, 64);
  EXPECT_TRUE(t.fuse_reductions && t.scan_spare_carries);
}

TEST(RefClient, CompilesSerializesAndLoads) {
  auto ref = ref::make_ref_client();
  Small& s = small();
  auto exe = ref->compile(s.p.g, {});
  EXPECT_EQ(exe->platform(), "ref");
  const auto a = exe->execute(buffers(s.p.inputs));
  auto loaded = ref->load(exe->serialize());
  const auto b = loaded->execute(buffers(s.p.inputs));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(host_value(a[i]).same_bytes(host_value(b[i])));
  EXPECT_GT(exe->predicted_peak_bytes(), 0);
  EXPECT_THROW(ref->load("keel-ref-executable 1\ngraph broken {"), InputError);
  EXPECT_THROW(ref->load(s.exe->serialize()), InputError);
  EXPECT_GT(ref->memory_stats(ref->devices()[0]).bytes_in_use, 0);
}

// The host's devices (cpu, ref) adopt a host value's bytes as PJRT's CPU client does, name the
// devices they have, and refuse in one line a buffer another device holds.
TEST(CpuBackend, HostDevicesAdoptHostValuesAndRefuseOtherDevicesBuffers) {
  Small& s = small();
  for (const std::shared_ptr<backend::Client>& client :
       {cpu::make_cpu_client(), ref::make_ref_client()}) {
    const std::string name = client->platform();
    const Array host = s.p.inputs[0];
    const backend::Buffer b = client->to_device(host, client->devices().at(0));
    EXPECT_EQ(b.address(), static_cast<const void*>(host.data())) << name;
    EXPECT_EQ(b.device(), "cpu:0") << name;
    EXPECT_TRUE(host_value(b).same_bytes(host)) << name;
    try {
      (void)client->to_device(host, backend::Device{1, "cpu"});
      ADD_FAILURE() << name << " placed a value on cpu:1";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("there is no device cpu:1"), std::string::npos)
          << e.what();
    }
    std::unique_ptr<backend::Executable> exe =
        name == "cpu" ? client->load(s.exe->serialize()) : client->compile(s.p.g, {});
    std::vector<backend::Buffer> in = buffers(*client, s.p.inputs);
    in[0] = testing_support::fake_device_buffer(s.p.inputs[0]);
    try {
      (void)exe->execute(in);
      ADD_FAILURE() << name << " ran a program on another device's buffer";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("[backend.{}] a buffer on fake:0 given to a program whose memory is "
                            "the host's; move it first (to_host, then this client's to_device)",
                            name));
    }
  }
}

// ---- the CPU backend's host block cache (backend/cpu/host_block_cache.h) ----

// Sets the cache's limit for a test and restores it after (sanitizer builds start at 0).
struct CacheLimit {
  explicit CacheLimit(int64_t bytes) : before(cpu::host_cache_limit()) {
    cpu::set_host_cache_limit(bytes);
    cpu::release_host_cache();
  }
  ~CacheLimit() { cpu::set_host_cache_limit(before); }
  int64_t before;
};

TEST(CpuHostCache, ZeroedBlocksAreZeroEvenWhenReused) {
  CacheLimit limit(int64_t{1} << 30);
  for (size_t n : {size_t{4000}, size_t{4} << 20}) {  // heap and mapped blocks
    {
      std::shared_ptr<HostBlock> dirty = cpu::allocate_cached(n, false);
      std::memset(dirty->data(), 0x5A, n);
    }
    const int64_t reused = cpu::host_cache_stats().reused_blocks;
    std::shared_ptr<HostBlock> clean = cpu::allocate_cached(n, true);
    EXPECT_EQ(cpu::host_cache_stats().reused_blocks, reused + 1) << n;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(clean->data()[i], std::byte{0}) << n << " " << i;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(clean->data()) % 64, 0u);
  }
}

TEST(CpuHostCache, ReleasedBlocksAreReusedBySize) {
  CacheLimit limit(int64_t{1} << 30);
  const cpu::HostCacheStats start = cpu::host_cache_stats();
  const std::byte* first = nullptr;
  {
    Array a = cpu::cached_array(DType::f32, {4096, 3});
    first = a.data();
    EXPECT_EQ(cpu::host_cache_stats().live_bytes, start.live_bytes + 4096 * 3 * 4);
  }
  EXPECT_EQ(cpu::host_cache_stats().cached_bytes, 4096 * 3 * 4);
  Array again = cpu::cached_array(DType::i32, {3, 4096});  // same bytes, other dtype
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(cpu::host_cache_stats().reused_blocks, start.reused_blocks + 1);
  EXPECT_EQ(cpu::host_cache_stats().cached_bytes, 0);
  Array other = cpu::cached_array(DType::f32, {4097, 3});  // another size: a fresh block
  EXPECT_NE(other.data(), first);
  EXPECT_EQ(cpu::host_cache_stats().fresh_blocks, start.fresh_blocks + 2);
}

TEST(CpuHostCache, LimitEvictsTheOldestReleasedBlocks) {
  CacheLimit limit(3 * 1024);
  { Array a = cpu::cached_array(DType::f32, {256}); }  // 1 KB, released first
  { Array b = cpu::cached_array(DType::f32, {512}); }  // 2 KB
  { Array c = cpu::cached_array(DType::f32, {384}); }  // 1.5 KB: pushes out the oldest two
  EXPECT_LE(cpu::host_cache_stats().cached_bytes, 3 * 1024);
  const int64_t reused = cpu::host_cache_stats().reused_blocks;
  { Array c = cpu::cached_array(DType::f32, {384}); }
  EXPECT_EQ(cpu::host_cache_stats().reused_blocks, reused + 1);
  { Array a = cpu::cached_array(DType::f32, {256}); }
  EXPECT_EQ(cpu::host_cache_stats().reused_blocks, reused + 1);  // the 1 KB block was evicted
  cpu::set_host_cache_limit(0);
  EXPECT_EQ(cpu::host_cache_stats().cached_bytes, 0);
}

// The client's own allocations (a step's zero gradients) come from the same cache, zeroed when
// asked even when the block is reused.
TEST(CpuHostCache, ClientAllocationsReuseBlocksAndZeroThem) {
  CacheLimit limit(int64_t{1} << 30);
  std::shared_ptr<backend::Client> client = cpu::make_cpu_client();
  const backend::Device cpu0 = client->devices().at(0);
  const void* first = nullptr;
  {
    const backend::Buffer dirty = client->allocate(DType::f32, {1000}, cpu0, false);
    first = dirty.address();
    backend::host_array(dirty, "test").set_f64(3, 7.0);
  }
  const int64_t reused = cpu::host_cache_stats().reused_blocks;
  const backend::Buffer zeros = client->allocate(DType::f32, {1000}, cpu0, true);
  EXPECT_EQ(zeros.address(), first);
  EXPECT_EQ(cpu::host_cache_stats().reused_blocks, reused + 1);
  for (float x : host_value(zeros).to_f32()) ASSERT_EQ(x, 0.0f);
}

// A program's outputs come from the backend's cache: the next run reuses the blocks the last
// one's outputs gave back, while arrays the host makes come from the system.
TEST(CpuHostCache, ProgramOutputsReuseTheLastRunsBlocks) {
  CacheLimit limit(int64_t{1} << 30);
  Small& s = small();
  s.exe->execute(buffers(s.p.inputs))[0].ready().wait();  // its blocks are back once it ran
  const cpu::HostCacheStats before = cpu::host_cache_stats();
  s.exe->execute(buffers(s.p.inputs))[0].ready().wait();
  EXPECT_GT(cpu::host_cache_stats().reused_blocks, before.reused_blocks);
  EXPECT_EQ(cpu::host_cache_stats().fresh_blocks, before.fresh_blocks);
  { Array host(DType::f32, {1000}); }
  EXPECT_EQ(cpu::host_cache_stats().fresh_blocks, before.fresh_blocks);
  EXPECT_EQ(cpu::host_cache_stats().cached_bytes, before.cached_bytes);
}

}  // namespace
}  // namespace keel
