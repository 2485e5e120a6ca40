#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <future>
#include <map>
#include <string>
#include <thread>

#include "backend/host_memory.h"
#include "ir/diff.h"
#include "ir/text.h"
#include "keel.h"
#include "passes/pipeline.h"
#include "tests/fake_device.h"
#include "tests/subprocess.h"

namespace keel {
namespace {

class TraceTest : public ::testing::Test {
 protected:
};

Tensor f32(Shape shape, std::vector<float> v) {
  return Tensor(Array::from_f32(shape, v));
}

std::string line_ref(int line) {
  return std::string("trace_test.cpp:") + std::to_string(line);
}

TEST_F(TraceTest, TracesOncePerSignatureNotPerValue) {
  auto f = compile("f", [](const Tensor& x) { return x * 2.0 + 1.0; });
  EXPECT_EQ(f(f32({2}, {1, 2})).to_f32(), (std::vector<float>{3, 5}));
  EXPECT_EQ(f(f32({2}, {10, 20})).to_f32(), (std::vector<float>{21, 41}));
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().calls, 2);
  f(f32({3}, {1, 2, 3}));
  EXPECT_EQ(f.stats().traces, 2);
  ASSERT_EQ(f.programs().size(), 2u);
  EXPECT_NE(f.programs()[0]->graph_hash, f.programs()[1]->graph_hash);
  EXPECT_EQ(f.programs()[0]->signature, "T|f32[2]");
}

// A program's results are held by the device: reading one on the host is a host read, handing it
// to the next program is not, and values the host made are its own.
TEST_F(TraceTest, HostReadsCountOnlyReadsOfValuesADeviceHolds) {
  auto f = compile("f", [](const Tensor& x) { return x * 2.0; });
  const Tensor host = f32({2}, {1, 2});
  const int64_t before = host_read_count();
  EXPECT_FALSE(host.is_held_by_device());
  EXPECT_EQ(host.to_f32(), (std::vector<float>{1, 2}));
  const Tensor out = f(host);
  EXPECT_TRUE(out.is_held_by_device());
  EXPECT_EQ(out.buffer().device(), "cpu:0");  // handing the buffer on is not a host read
  const Tensor again = f(out);
  EXPECT_EQ(host_read_count(), before);
  EXPECT_EQ(out.to_f32(), (std::vector<float>{2, 4}));
  EXPECT_EQ(again.array().get_f64(0), 4.0);
  EXPECT_EQ(host_read_count(), before + 2);
}

// A host copy is ordered after the value's last write without the host waiting for it (PJRT's
// ToHostBuffer): to_host returns at once, and its copy is there once the write is.
TEST(HostCopy, WaitsForThePendingWriteWithoutBlockingTheHost) {
  using testing_support::fake_device_buffer;
  Buffer b = fake_device_buffer(Array::from_f32({2}, std::vector<float>{1, 2}));
  Buffer host_memory = backend::adopt_host_array(Array::from_f32({2}, std::vector<float>{3, 4}),
                                                 backend::host_device());
  for (Buffer* buffer : {&b, &host_memory}) {
    const Event write = Event::pending();  // a program still writing the value
    buffer->written(write);
    std::promise<void> read_started;
    std::thread program([&write, started = read_started.get_future()] {
      started.wait_for(std::chrono::seconds(5));  // a to_host that blocked gets its write late
      write.complete();
    });
    const HostCopy read = buffer->to_host();
    EXPECT_FALSE(write.done()) << buffer->device() << ": to_host waited for the write";
    EXPECT_FALSE(read.done.done()) << buffer->device();
    read_started.set_value();
    EXPECT_EQ(read.get().to_f32().size(), 2u) << buffer->device();
    EXPECT_TRUE(write.done());
    program.join();
  }
}

// A lone read is one whose copy the read itself started; a copy started ahead (a log point's
// start_host_copies) or by an earlier read leaves its reads not lone.
TEST_F(TraceTest, LoneHostReadsAreReadsWhoseCopyNothingStartedAhead) {
  auto f = compile("f", [](const Tensor& x) { return x * 2.0; });
  const Tensor a = f(f32({2}, {1, 2}));
  const Tensor b = f(a);
  const Tensor c = f(b);
  const int64_t reads = host_read_count(), lone = lone_host_read_count();
  EXPECT_EQ(a.to_f32(), (std::vector<float>{2, 4}));  // its copy starts here: lone
  EXPECT_EQ(a.array().get_f64(1), 4.0);               // the same copy: read, not lone
  EXPECT_EQ(lone_host_read_count(), lone + 1);
  start_host_copies({b, c});
  EXPECT_EQ(b.to_f32(), (std::vector<float>{4, 8}));
  EXPECT_EQ(c.to_f32(), (std::vector<float>{8, 16}));
  EXPECT_EQ(host_read_count(), reads + 4);
  EXPECT_EQ(lone_host_read_count(), lone + 1);
}

// Donation at the API: argument 0 is donated to result 1, so the update lands in the
// argument's storage, the result is that storage, and the consumed argument cannot be read.
TEST_F(TraceTest, DonatedArgumentsAreUpdatedInPlaceAndConsumed) {
  auto body = [](const NamedTensors& p, const Tensor& g) {
    NamedTensors next;
    for (const auto& [name, w] : p) next[name] = w - g * 0.5;
    return std::tuple<Tensor, NamedTensors>{sum(g), next};
  };
  const int line = __LINE__ + 1;
  auto donated = compile("update", body, {nullptr, {{0, 1}}});
  auto plain = compile("update", body);
  NamedTensors p{{"a", f32({3}, {1, 2, 3})}, {"b", f32({2}, {4, 5})}};
  NamedTensors q{{"a", f32({3}, {1, 2, 3})}, {"b", f32({2}, {4, 5})}};
  const std::byte* a_storage = p.at("a").array().data();
  Tensor g = f32({}, {2});
  EXPECT_THROW(donated(p, f32({4}, {1, 1, 1, 1})), Error);  // a - g fails to trace
  EXPECT_FALSE(p.at("a").donated());                        // and consumes nothing
  for (int step = 0; step < 3; ++step) {
    auto [s1, next] = donated(p, g);
    auto [s2, want] = plain(q, g);
    EXPECT_EQ(next.at("a").array().data(), a_storage);
    EXPECT_EQ(next.at("a").to_f32(), want.at("a").to_f32());
    EXPECT_TRUE(p.at("a").donated());
    try {
      p.at("a").to_f32();
      ADD_FAILURE() << "reading a donated tensor must fail";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("of a tensor donated to 'update' (compiled at "), std::string::npos)
          << what;
      EXPECT_NE(what.find(line_ref(line) + ")"), std::string::npos) << what;
    }
    try {  // the consumed arguments, passed again
      donated(p, g);
      ADD_FAILURE() << "a consumed argument was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[compile] 'update': argument leaf 0 was donated to "
                                           "'update' (compiled at "),
                std::string::npos)
          << e.what();
    }
    p = next;
    q = want;
  }
  EXPECT_NE(print_graph(donated.programs()[0]->graph).find(" -> %"), std::string::npos);
  EXPECT_NE(donated.programs()[0]->graph_hash, plain.programs()[0]->graph_hash);
}

// Tensors and compiled functions work through Buffer handles alone: on a device whose memory is
// not the host's, a host-made argument is placed by the JIT, results stay on the device from call
// to call, and the host sees a value only by copying it (once per tensor, each read counted).
TEST_F(TraceTest, ValuesOfADeviceWhoseMemoryIsNotTheHostsMoveOnlyWhenRead) {
  using testing_support::fake_device_buffer;
  using testing_support::FakeDeviceMemory;
  struct Doubling : Runnable {  // x * 2, reading and writing the device through copies
    std::vector<Buffer> run(std::span<const Buffer> inputs) override {
      const Array x = inputs[0].to_host().get();
      Array y = x.clone();
      for (int64_t i = 0; i < y.numel(); ++i) y.set_f64(i, 2 * x.get_f64(i));
      return {fake_device_buffer(y)};
    }
  };
  struct FakeDeviceJit : Jit {
    int placed = 0;
    std::string name() const override { return "fake"; }
    std::shared_ptr<Runnable> prepare(const Graph&, const ProgramRequest&) override {
      return std::make_shared<Doubling>();
    }
    Buffer to_device(const Array& host) override {
      ++placed;
      return fake_device_buffer(host);
    }
  };
  auto jit = std::make_shared<FakeDeviceJit>();
  auto f = compile("twice", [](const Tensor& x) { return x * 2.0; }, {jit, {}});
  const Tensor x = f32({2}, {1, 2});
  const Tensor y = f(x);
  EXPECT_EQ(jit->placed, 1);
  ASSERT_TRUE(y.is_held_by_device());
  EXPECT_EQ(y.buffer().device(), "fake:0");
  const int copies = FakeDeviceMemory::host_copies;
  const int64_t reads = host_read_count();
  const Tensor z = f(y);  // on the device from call to call: nothing placed, nothing read
  EXPECT_EQ(jit->placed, 1);
  EXPECT_EQ(host_read_count(), reads);
  EXPECT_EQ(FakeDeviceMemory::host_copies, copies + 1);  // the program's own read of y
  EXPECT_EQ(z.to_f32(), (std::vector<float>{4, 8}));
  EXPECT_EQ(z.array().get_f64(1), 8.0);
  EXPECT_EQ(host_read_count(), reads + 2);               // each read counts
  EXPECT_EQ(FakeDeviceMemory::host_copies, copies + 2);  // one copy serves both
  try {
    (void)x.buffer();
    ADD_FAILURE() << "a host-made value handed out a buffer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[trace] buffer() at "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("of a value the host made (f32[2]); place it on a device"),
              std::string::npos)
        << e.what();
  }
}

// A call that fails while its program runs may have written its donated buffers: the donated
// arguments count as consumed all the same, and say so; an undonated argument stays readable.
TEST_F(TraceTest, AFailedDonatingCallConsumesItsArguments) {
  // A program that writes into its first input, then fails (out of memory in a kernel, say).
  struct Failing : Runnable {
    std::vector<Buffer> run(std::span<const Buffer> inputs) override {
      backend::host_array(inputs[0], "test").set_f64(0, 42.0);
      throw Error("[test] the program failed half way");
    }
  };
  struct FailingJit : Jit {
    std::string name() const override { return "failing"; }
    std::shared_ptr<Runnable> prepare(const Graph&, const ProgramRequest&) override {
      return std::make_shared<Failing>();
    }
    Buffer to_device(const Array& host) override {
      return backend::adopt_host_array(host, backend::Device{0, "cpu"});
    }
  };
  auto f =
      compile("update", [](const Tensor& w, const Tensor& g) { return std::tuple<Tensor>(w - g); },
              {std::make_shared<FailingJit>(), {{0, 0}}});
  Tensor w = f32({2}, {1, 2}), g = f32({2}, {3, 4});
  EXPECT_THROW(f(w, g), Error);
  ASSERT_TRUE(w.donated());
  EXPECT_NE(w.donated_by().find("donated to a failed call of 'update'"), std::string::npos)
      << w.donated_by();
  EXPECT_FALSE(g.donated());
  EXPECT_EQ(g.to_f32(), (std::vector<float>{3, 4}));
  EXPECT_EQ(f.stats().calls, 0);  // a failed call does not advance the function's step
}

// A donated leaf that shares its storage with another argument leaf (m and v made from one zero
// array) is copied first, so neither sees the other's update.
TEST_F(TraceTest, DonatedStorageSharedWithAnotherArgumentIsCopiedFirst) {
  auto f = compile("moments",
                   [](const Tensor& m, const Tensor& v, const Tensor& g) {
                     return std::tuple<Tensor, Tensor>{m + g, v + g * g};
                   },
                   {nullptr, {{0, 0}, {1, 1}}});
  Tensor zeros = f32({2}, {0, 0});
  auto [m, v] = f(zeros, zeros, f32({2}, {3, 4}));
  EXPECT_EQ(m.to_f32(), (std::vector<float>{3, 4}));
  EXPECT_EQ(v.to_f32(), (std::vector<float>{9, 16}));
  EXPECT_EQ(f.stats().donation_copies, 1);
  EXPECT_NE(m.array().data(), v.array().data());
}

TEST_F(TraceTest, DonationMustPairLikeStructures) {
  auto structure = compile("f",
                           [](const Tensor& x) {
                             return std::vector<Tensor>{x, x};
                           },
                           {nullptr, {{0, 0}}});
  try {
    structure(f32({1}, {1}));
    ADD_FAILURE() << "expected a structure mismatch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 0 is donated to result 0 but their "
                                         "structures differ (T vs [2:TT])"),
              std::string::npos)
        << e.what();
  }
  auto types = compile("g", [](const Tensor& x) { return sum(x); }, {nullptr, {{0, 0}}});
  try {
    types(f32({2}, {1, 2}));
    ADD_FAILURE() << "expected a type mismatch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("its leaf 0 is f32[2] and the result's is f32[]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(compile("h", [](const Tensor& x) { return x; }, {nullptr, {{0, 0}, {0, 1}}}), Error);
}

TEST_F(TraceTest, ScalarChangesValueNotProgram) {
  auto step = compile("step", [](const Tensor& w, const Scalar& lr) { return w - lr * w; });
  Tensor w = f32({2}, {1, 2});
  EXPECT_EQ(step(w, Scalar(0.5)).to_f32(), (std::vector<float>{0.5, 1}));
  EXPECT_EQ(step(w, Scalar(0.25)).to_f32(), (std::vector<float>{0.75, 1.5}));
  EXPECT_EQ(step.stats().traces, 1);
}

TEST_F(TraceTest, NestedStructuresRoundTrip) {
  auto f = compile("f", [](const NamedTensors& p, const std::vector<Tensor>& xs) {
    return std::make_pair(p.at("b") + xs[0], std::vector<Tensor>{p.at("a") * xs[1]});
  });
  NamedTensors p{{"a", f32({1}, {2})}, {"b", f32({1}, {3})}};
  auto [s, v] = f(p, {f32({1}, {4}), f32({1}, {5})});
  EXPECT_EQ(s.item(), 7);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].item(), 10);
  EXPECT_EQ(f.programs()[0]->signature, "{a=T,b=T,}[2:TT]|f32[1],f32[1],f32[1],f32[1]");
}

TEST_F(TraceTest, ReadingAValueInsideATraceNamesTheLine) {
  int line = 0;
  auto f = compile("f", [&](const Tensor& x) {
    line = __LINE__ + 1;
    double v = x.item();
    return x * v;
  });
  try {
    f(f32({}, {1}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(line_ref(line)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[trace]"), std::string::npos) << e.what();
  }
}

TEST_F(TraceTest, ShapeMismatchNamesTheLine) {
  int line = 0;
  auto f = compile("f", [&](const Tensor& a, const Tensor& b) {
    line = __LINE__ + 1;
    return a + b;
  });
  try {
    f(f32({2}, {1, 2}), f32({3}, {1, 2, 3}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(line_ref(line)), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2] and [3] do not broadcast"), std::string::npos) << msg;
  }
}

TEST_F(TraceTest, CapturedValueIsAnErrorNotASilentConstant) {
  Tensor outside = f32({2}, {1, 2});
  auto f = compile("f", [&](const Tensor& x) { return x + outside; });
  try {
    f(f32({2}, {1, 2}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("captured from outside 'f'"), std::string::npos)
        << e.what();
  }
}

TEST_F(TraceTest, SymbolCannotEscapeItsTrace) {
  Tensor leaked;
  auto f = compile("f", [&](const Tensor& x) {
    leaked = exp(x);
    return x;
  });
  f(f32({1}, {1}));
  auto g = compile("g", [&](const Tensor& x) { return x + leaked; });
  try {
    g(f32({1}, {1}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("which has ended"), std::string::npos) << e.what();
  }
  EXPECT_THROW(leaked.item(), Error);
}

TEST_F(TraceTest, OpsOutsideATraceAreAnError) {
  EXPECT_THROW(exp(f32({1}, {1})), Error);
}

TEST_F(TraceTest, ConstantKeepsItsSourceLine) {
  int line = 0;
  auto f = compile("f", [&](const Tensor& x) {
    line = __LINE__ + 1;
    return x * 0.5;
  });
  f(f32({1}, {1}));
  const Graph& g = f.programs()[0]->graph;
  bool found = false;
  for (const Node& n : g.nodes()) {
    if (n.op == Op::constant) {
      EXPECT_EQ(n.loc.line, static_cast<uint32_t>(line));
      EXPECT_NE(n.loc.file.find("trace_test.cpp"), std::string::npos);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(TraceTest, ChangedConstantChangesKeyAndNamesLine) {
  int line = 0;
  auto make = [&](double c) {
    return compile("f", [&line, c](const Tensor& x) {
      line = __LINE__ + 1;
      return x * c;
    });
  };
  auto a = make(0.5);
  auto b = make(0.25);
  a(f32({1}, {1}));
  b(f32({1}, {1}));
  const Program& pa = *a.programs()[0];
  const Program& pb = *b.programs()[0];
  EXPECT_NE(pa.graph_hash, pb.graph_hash);
  std::string why = explain_difference(pa.graph, pb.graph);
  EXPECT_NE(why.find(line_ref(line)), std::string::npos) << why;
  EXPECT_NE(why.find("0.5"), std::string::npos) << why;
  EXPECT_NE(why.find("0.25"), std::string::npos) << why;
}

TEST_F(TraceTest, ThrowingTraceDoesNotPoisonTheTable) {
  bool fail = true;
  auto f = compile("f", [&](const Tensor& x) {
    if (fail) throw std::runtime_error("user error during trace");
    return x + 1.0;
  });
  EXPECT_THROW(f(f32({1}, {1})), std::runtime_error);
  EXPECT_TRUE(f.programs().empty());
  fail = false;
  EXPECT_EQ(f(f32({1}, {1})).item(), 2);
  EXPECT_EQ(f.programs().size(), 1u);
}

TEST_F(TraceTest, NestedCompileIsInlinedIntoOneProgram) {
  auto inner = compile("inner", [](const Tensor& x) { return exp(x); });
  auto outer = compile("outer", [&](const Tensor& x) { return inner(x) + 1.0; });
  EXPECT_NEAR(outer(f32({}, {0})).item(), 2.0, 1e-6);
  EXPECT_EQ(inner.stats().calls, 0);
  EXPECT_EQ(outer.programs().size(), 1u);
}

TEST_F(TraceTest, ValueAndGradJoinsTheSameProgram) {
  auto step = compile("step", [](const std::vector<Tensor>& p, const Tensor& x) {
    auto loss_fn = [](const std::vector<Tensor>& q, const Tensor& in) {
      return sum(q[0] * in * in);
    };
    auto [loss, grads] = value_and_grad(loss_fn)(p, x);
    return std::make_pair(loss, grads);
  });
  auto [loss, grads] = step({f32({2}, {3, 4})}, f32({2}, {1, 2}));
  EXPECT_EQ(loss.item(), 3 * 1 + 4 * 4);
  EXPECT_EQ(grads[0].to_f32(), (std::vector<float>{1, 4}));
  EXPECT_EQ(step.programs().size(), 1u);
}

TEST_F(TraceTest, MatmulBroadcastsASharedWeight) {
  auto f = compile("f", [](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  Tensor a = f32({2, 1, 2}, {1, 2, 3, 4});
  Tensor b = f32({2, 2}, {1, 0, 0, 1});
  Tensor c = f(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(c.to_f32(), (std::vector<float>{1, 2, 3, 4}));
}

// ---- scan

Tensor ramp(Shape shape, float scale, float shift) {
  std::vector<float> v(size_t(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.37f * float(i) + shift);
  return f32(shape, v);
}

// A residual MLP block: x' = x + tanh(x.W1 + b).W2, y = sum(x'^2).
std::pair<Tensor, Tensor> block(const Tensor& x, const Tensor& w1, const Tensor& w2,
                                const Tensor& b) {
  Tensor x2 = x + matmul(tanh(matmul(x, w1) + b), w2);
  return {x2, sum(x2 * x2, {1})};
}

// loss = sum(final x) + sum(ys * ys) with x scanned (or unrolled) over L layers.
Tensor layers_loss(const std::vector<Tensor>& p, bool scanned, int* traced,
                   ScanOptions options = {}) {
  const int64_t L = p[1].shape()[0];
  Tensor x = p[0], ys;
  if (scanned) {
    ScanOut out = scan(
        [&](const std::vector<Tensor>& c, const std::vector<Tensor>& w,
            const std::vector<Tensor>& k) {
          ++*traced;
          auto [x2, y] = block(c[0], w[0], w[1], k[0]);
          return std::make_pair(std::vector<Tensor>{x2}, std::vector<Tensor>{y});
        },
        {p[0]}, {p[1], p[2]}, {p[3]}, options);
    x = out.carries[0];
    ys = out.ys[0];
  } else {
    std::vector<Tensor> each;
    for (int64_t i = 0; i < L; ++i) {
      const Shape s1 = p[1].shape(), s2 = p[2].shape();
      Tensor w1 = reshape(slice(p[1], {i, 0, 0}, {i + 1, s1[1], s1[2]}), {s1[1], s1[2]});
      Tensor w2 = reshape(slice(p[2], {i, 0, 0}, {i + 1, s2[1], s2[2]}), {s2[1], s2[2]});
      auto [x2, y] = block(x, w1, w2, p[3]);
      x = x2;
      each.push_back(reshape(y, {1, y.shape()[0]}));
    }
    ys = concat(each, 0);
  }
  return sum(x) + sum(ys * ys);
}

TEST_F(TraceTest, ScanTracesTheBodyOnceAndItsGradientsEqualTheUnrolledOnes) {
  const int64_t L = 4;
  std::vector<Tensor> p = {ramp({2, 3}, 0.5f, 0), ramp({L, 3, 5}, 0.4f, 1),
                           ramp({L, 5, 3}, 0.4f, 2), ramp({5}, 0.3f, 3)};
  int traced = 0;
  auto run = [&](bool scanned) {
    auto step = compile(scanned ? "scanned" : "unrolled", [&](const std::vector<Tensor>& q) {
      auto [loss, grads] = value_and_grad(
          [&](const std::vector<Tensor>& r) { return layers_loss(r, scanned, &traced); })(q);
      return std::make_pair(loss, grads);
    });
    return step(p);
  };
  auto [loss_s, grads_s] = run(true);
  EXPECT_EQ(traced, 1);  // once, not once per layer
  auto [loss_u, grads_u] = run(false);
  EXPECT_NEAR(loss_s.item(), loss_u.item(), 1e-5 * std::abs(loss_u.item()));
  ASSERT_EQ(grads_s.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    std::vector<float> a = grads_s[k].to_f32(), b = grads_u[k].to_f32();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::abs(b[i])) << k;
  }
}

// By default the backward scan reads the forward values the forward scan saved (the body's
// tanh and products are not run again); with remat it recomputes what the policy did not keep:
// everything (tanh and both forward products) or, keeping the products, only the tanh. Each
// gives the unrolled gradients.
TEST_F(TraceTest, ScanGradientReadsSavedValuesAndRecomputesWhatTheRematPolicyDropped) {
  const int64_t L = 3;
  std::vector<Tensor> p = {ramp({2, 3}, 0.5f, 0), ramp({L, 3, 5}, 0.4f, 1),
                           ramp({L, 5, 3}, 0.4f, 2), ramp({5}, 0.3f, 3)};
  int traced = 0;
  auto program = [&](bool scanned, ScanOptions o) {
    return compile("f", [&, scanned, o](const std::vector<Tensor>& q) {
      return value_and_grad(
          [&](const std::vector<Tensor>& r) { return layers_loss(r, scanned, &traced, o); })(q);
    });
  };
  auto unrolled = program(false, {});
  auto [loss_u, grads_u] = unrolled(p);
  struct Case {
    ScanOptions options;
    int tanh, products;  // in the backward body: recomputed tanh, products (4 are gradients)
  };
  const Case cases[] = {
      {{}, 0, 4},
      {{.remat = true}, 1, 6},
      {{.remat = true, .remat_policy = RematPolicy::dots_saveable}, 1, 4},
      {{.remat = true, .remat_policy = RematPolicy::dots_with_no_batch_dims_saveable}, 1, 4}};
  for (const Case& c : cases) {
    const std::string name =
        c.options.remat ? std::string(remat_policy_name(c.options.remat_policy)) : "no remat";
    auto f = program(true, c.options);
    auto [loss, grads] = f(p);
    EXPECT_NEAR(loss.item(), loss_u.item(), 1e-5 * std::abs(loss_u.item())) << name;
    for (size_t k = 0; k < grads.size(); ++k) {
      std::vector<float> a = grads[k].to_f32(), b = grads_u[k].to_f32();
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::abs(b[i])) << name << " " << k;
    }
    const Graph low = passes::lower(f.programs().at(0)->graph).graph;
    int backward_scans = 0, backward_tanh = 0, backward_products = 0;
    for (const Node& n : low.nodes()) {
      if (n.op != Op::scan || n.attrs.i("reverse") == 0) continue;
      ++backward_scans;
      for (const Node& b : n.attrs.graph("body").nodes()) {
        backward_tanh += b.op == Op::tanh;
        backward_products += b.op == Op::dot_general;
      }
    }
    EXPECT_EQ(backward_scans, 1) << print_graph(low);
    EXPECT_EQ(backward_tanh, c.tanh) << name << print_graph(low);
    EXPECT_EQ(backward_products, c.products) << name << print_graph(low);
    if (c.options.remat) {
      EXPECT_EQ(remat_policy_named(name), c.options.remat_policy);
    }
  }
  EXPECT_FALSE(remat_policy_named("dots"));
  // Without a gradient nothing is saved: lowering keeps the carry and the one y.
  auto forward =
      compile("fwd", [&](const std::vector<Tensor>& q) { return layers_loss(q, true, &traced); });
  forward(p);
  const Graph traced_graph = forward.programs().at(0)->graph;
  const Graph low = passes::lower(traced_graph).graph;
  auto results = [](const Graph& g) {
    size_t n = 0;
    for (const Node& node : g.nodes()) n += node.op == Op::scan_result;
    return n;
  };
  EXPECT_GT(results(traced_graph), 3u);  // the candidates: tanh, the matmuls, ...
  EXPECT_EQ(results(low), 2u) << print_graph(low);
}

// An attention layer in the rotary style, q joining two scaled halves of h = x.w, whose output
// is projected (a product reads its tanh) and gated by sigmoid(h).
Tensor joined_attention_layer(const Tensor& x, const Tensor& w) {
  const Tensor h = matmul(x, w);  // [1, 2, 4, 4]
  const Tensor q = concat(
      {slice(h, {0, 0, 0, 0}, {1, 2, 4, 2}) * 2.0, slice(h, {0, 0, 0, 2}, {1, 2, 4, 4}) * 3.0}, 3);
  return x + matmul(tanh(causal_attention(q, h, h, 0.5)), w) * sigmoid(h);
}

// Without remat the backward body reads what the forward saved: the joined q (not its halves,
// joined again), the attention's log-sum-exp rows (not a second pass over q and k) and the tanh
// a product reads; the gate, an elementwise value of the saved h, it computes again.
TEST_F(TraceTest, ScanGradientReadsTheSavedJoinAndLogSumExp) {
  const int64_t L = 3;
  std::vector<Tensor> p = {ramp({1, 2, 4, 4}, 0.5f, 0), ramp({L, 4, 4}, 0.4f, 1)};
  auto program = [&](bool scanned) {
    return compile("f", [scanned](const std::vector<Tensor>& q) {
      return value_and_grad([scanned](const std::vector<Tensor>& r) {
        Tensor x = r[0];
        if (scanned) {
          x = scan(
                  [](const std::vector<Tensor>& c, const std::vector<Tensor>& w,
                     const std::vector<Tensor>&) {
                    return std::make_pair(std::vector<Tensor>{joined_attention_layer(c[0], w[0])},
                                          std::vector<Tensor>{});
                  },
                  {x}, {r[1]}, {})
                  .carries[0];
        } else {
          for (int64_t i = 0; i < L; ++i) {
            x = joined_attention_layer(x, reshape(slice(r[1], {i, 0, 0}, {i + 1, 4, 4}), {4, 4}));
          }
        }
        return sum(x * x);
      })(q);
    });
  };
  auto unrolled = program(false), scanned = program(true);
  auto [loss_u, grads_u] = unrolled(p);
  auto [loss_s, grads_s] = scanned(p);
  EXPECT_NEAR(loss_s.item(), loss_u.item(), 1e-5 * std::abs(loss_u.item()));
  for (size_t k = 0; k < grads_u.size(); ++k) {
    std::vector<float> a = grads_s[k].to_f32(), b = grads_u[k].to_f32();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::abs(b[i]));
  }
  const Graph low = passes::lower(scanned.programs().at(0)->graph).graph;
  std::map<Op, int> saved, recomputed;  // forward body outputs; backward body nodes
  for (const Node& n : low.nodes()) {
    if (n.op != Op::scan) continue;
    const Graph& body = n.attrs.graph("body");
    if (n.attrs.i("reverse") == 0) {
      for (NodeId o : body.outputs()) ++saved[body.node(o).op];
    } else {
      for (const Node& b : body.nodes()) ++recomputed[b.op];
    }
  }
  EXPECT_EQ(saved[Op::concat], 1) << print_graph(low);
  EXPECT_EQ(saved[Op::attention_lse], 1) << print_graph(low);
  EXPECT_EQ(saved[Op::mul], 0) << print_graph(low);  // the halves, the gated output
  EXPECT_EQ(saved[Op::tanh], 1) << print_graph(low);
  EXPECT_EQ(saved[Op::sigmoid], 0) << print_graph(low);
  EXPECT_EQ(recomputed[Op::sigmoid], 1) << print_graph(low);
  EXPECT_EQ(recomputed[Op::attention_lse], 0) << print_graph(low);
  EXPECT_EQ(recomputed[Op::attention], 0) << print_graph(low);
  EXPECT_EQ(recomputed[Op::attention_dq], 1) << print_graph(low);
}

TEST_F(TraceTest, ScanBodyCapturingAnOuterTensorNamesTheLine) {
  int line = 0;
  auto f = compile("f", [&](const Tensor& x, const Tensor& xs) {
    return scan(
               [&](const std::vector<Tensor>& c, const std::vector<Tensor>& s,
                   const std::vector<Tensor>&) {
                 line = __LINE__ + 1;
                 Tensor bad = c[0] + s[0] * x;
                 return std::make_pair(std::vector<Tensor>{bad}, std::vector<Tensor>{});
               },
               {x}, {xs})
        .carries[0];
  });
  try {
    f(f32({2}, {1, 2}), f32({3, 2}, {1, 2, 3, 4, 5, 6}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(line_ref(line)), std::string::npos) << msg;
    EXPECT_NE(msg.find("pass it to keel::scan as a const"), std::string::npos) << msg;
  }
}

// A body tensor smuggled out of the body (captured by reference) is an error naming the line
// that made it, not a crash.
TEST_F(TraceTest, ScanBodyTensorUsedAfterTheScanNamesItsLine) {
  int line = 0;
  auto f = compile("f", [&](const Tensor& x, const Tensor& xs) {
    Tensor escaped;
    Tensor c = scan(
                   [&](const std::vector<Tensor>& c, const std::vector<Tensor>& s,
                       const std::vector<Tensor>&) {
                     line = __LINE__ + 1;
                     escaped = c[0] * s[0];
                     return std::make_pair(std::vector<Tensor>{escaped}, std::vector<Tensor>{});
                   },
                   {x}, {xs})
                   .carries[0];
    return c + escaped;
  });
  try {
    f(f32({2}, {1, 2}), f32({3, 2}, {1, 2, 3, 4, 5, 6}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[trace] ", 0), 0u) << msg;
    EXPECT_NE(msg.find("which has ended"), std::string::npos) << msg;
    EXPECT_NE(msg.find(line_ref(line)), std::string::npos) << msg;
  }
}

TEST_F(TraceTest, ScanTreeTakesStructuresAndRunsReversed) {
  auto f = compile("f", [](const Tensor& c0, const Tensor& xs) {
    using Pair = std::pair<Tensor, Tensor>;
    auto [c, ys] = scan_tree(
        [](const Pair& c, const Tensor& x, const std::vector<Tensor>&) {
          return std::make_pair(Pair{c.first + x, c.second * 2.0}, c.first);
        },
        Pair{c0, c0}, xs, std::vector<Tensor>{}, ScanOptions{.reverse = true});
    return std::make_tuple(c.first, c.second, ys);
  });
  auto [a, b, ys] = f(f32({1}, {1}), f32({3, 1}, {10, 20, 30}));
  EXPECT_EQ(a.to_f32(), (std::vector<float>{61}));
  EXPECT_EQ(b.to_f32(), (std::vector<float>{8}));
  EXPECT_EQ(ys.to_f32(), (std::vector<float>{51, 31, 1}));  // carry before each step, by index
}

TEST_F(TraceTest, ScanWithoutXsTakesItsLengthAndForwardProgramsDropTheResiduals) {
  auto f = compile("f", [](const Tensor& c) {
    ScanOut out = scan(
        [](const std::vector<Tensor>& c, const std::vector<Tensor>&, const std::vector<Tensor>&) {
          return std::make_pair(std::vector<Tensor>{c[0] * 2.0}, std::vector<Tensor>{c[0] + 0.5});
        },
        {c}, {}, {}, ScanOptions{.length = 5});
    return std::make_pair(out.carries[0], out.ys[0]);
  });
  auto [c, ys] = f(f32({1}, {1}));
  EXPECT_EQ(c.to_f32(), (std::vector<float>{32}));
  EXPECT_EQ(ys.to_f32(), (std::vector<float>{1.5, 2.5, 4.5, 8.5, 16.5}));
  // The traced scan also stacks its incoming carries (for a gradient); lowering drops them.
  const Graph& g = f.programs().at(0)->graph;
  size_t results = 0;
  for (const Node& n : g.nodes()) results += n.op == Op::scan_result;
  EXPECT_EQ(results, 3u);
  const Graph low = passes::lower(g).graph;
  results = 0;
  for (const Node& n : low.nodes()) results += n.op == Op::scan_result;
  EXPECT_EQ(results, 2u) << print_graph(low);
}

TEST_F(TraceTest, ScanBodyErrorsNameTheScanLine) {
  auto expect_error = [](auto fn, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "expected an error about " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const int changes_line = __LINE__ + 2;
  auto changes_type = compile("f", [&](const Tensor& c) {
    return scan(
               [](const std::vector<Tensor>& c, const std::vector<Tensor>&,
                  const std::vector<Tensor>&) {
                 return std::make_pair(std::vector<Tensor>{sum(c[0])}, std::vector<Tensor>{});
               },
               {c}, {}, {}, ScanOptions{.length = 2})
        .carries[0];
  });
  expect_error([&] { changes_type(f32({2}, {1, 2})); }, line_ref(changes_line));
  expect_error([&] { changes_type(f32({2}, {1, 2})); }, "a carry keeps its type");
  const int no_length_line = __LINE__ + 2;
  auto no_length = compile("g", [&](const Tensor& c) {
    return scan([](const std::vector<Tensor>& c, const std::vector<Tensor>&,
                   const std::vector<Tensor>&) { return std::make_pair(c, std::vector<Tensor>{}); },
                {c}, {})
        .carries[0];
  });
  expect_error([&] { no_length(f32({2}, {1, 2})); }, line_ref(no_length_line));
  expect_error([&] { no_length(f32({2}, {1, 2})); }, "ScanOptions::length");
}

std::string run_probe(const char* scale, const char* fill) {
  std::string cmd = std::string(KEEL_BINARY_DIR) + "/tests/key_probe " + scale + " " + fill;
  testing_support::CommandResult r = testing_support::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd;
  return r.output;
}

std::string hash_of(const std::string& probe) {
  return probe.substr(11, 32);  // after "graph hash "
}
std::string text_of(const std::string& probe) {
  return probe.substr(probe.find("\ngraph ") + 1);
}

TEST(GraphHashStability, SameProgramInTwoProcessesHasTheSameHash) {
  std::string a = run_probe("2", "1");
  std::string b = run_probe("2", "1");
  ASSERT_EQ(a.rfind("graph hash ", 0), 0u) << a;
  EXPECT_EQ(hash_of(a), hash_of(b));
  EXPECT_EQ(a, b);
}

TEST(GraphHashStability, DifferentInputValuesGiveTheSameHash) {
  std::string a = run_probe("2", "1");
  std::string b = run_probe("2", "7");
  EXPECT_EQ(hash_of(a), hash_of(b));
  EXPECT_NE(a.substr(0, a.find("\ngraph ")), b.substr(0, b.find("\ngraph ")));  // values differ
}

TEST(GraphHashStability, ChangedConstantChangesTheHashAndNamesItsLine) {
  std::string a = run_probe("2", "1");
  std::string b = run_probe("3", "1");
  EXPECT_NE(hash_of(a), hash_of(b));
  std::string why = explain_difference(parse_graph(text_of(a)), parse_graph(text_of(b)));
  std::string line = a.substr(a.find("line ") + 5, a.find("\nvalue") - a.find("line ") - 5);
  EXPECT_NE(why.find("key_probe.cpp:" + line), std::string::npos) << why;
  EXPECT_NE(why.find("2 -> 3"), std::string::npos) << why;
}

// ---- keel::bucketed (issue 16) ----

// y = 2x + 1 per position, the masked sum over the axis, and a masked softmax over it.
std::vector<Tensor> bucket_body(const std::vector<Tensor>& a, const Tensor& valid) {
  const Tensor& x = a[0];  // [B, L]
  const int64_t B = x.shape()[0], L = x.shape()[1];
  const Tensor m = broadcast_to(reshape(valid, {1, L}), {B, L});
  const Tensor logits = x + (m - 1.0) * 1e9;
  const Tensor e = exp(logits - broadcast_to(reshape(max(logits, {1}), {B, 1}), {B, L})) * m;
  const Tensor p = e / broadcast_to(reshape(sum(e, {1}), {B, 1}), {B, L});
  return {x * 2.0 + 1.0, sum(x * m, {1}), p};
}

// The unpadded results, computed directly.
void expect_unpadded(const Tensor& x, const std::vector<Tensor>& out) {
  const int64_t B = x.shape()[0], L = x.shape()[1];
  const std::vector<float> v = x.to_f32();
  ASSERT_EQ(out.size(), 3u);
  ASSERT_EQ(out[0].shape(), (Shape{B, L}));
  ASSERT_EQ(out[1].shape(), (Shape{B}));
  ASSERT_EQ(out[2].shape(), (Shape{B, L}));
  const std::vector<float> y = out[0].to_f32(), total = out[1].to_f32(), p = out[2].to_f32();
  for (int64_t b = 0; b < B; ++b) {
    double s = 0, top = -1e30, z = 0;
    for (int64_t t = 0; t < L; ++t) {
      s += v[size_t(b * L + t)];
      top = std::max(top, double(v[size_t(b * L + t)]));
    }
    for (int64_t t = 0; t < L; ++t) z += std::exp(v[size_t(b * L + t)] - top);
    EXPECT_NEAR(total[size_t(b)], s, 1e-4 * (1 + std::abs(s)));
    for (int64_t t = 0; t < L; ++t) {
      const size_t i = size_t(b * L + t);
      EXPECT_FLOAT_EQ(y[i], 2 * v[i] + 1);
      EXPECT_NEAR(p[i], std::exp(v[i] - top) / z, 1e-6);
    }
  }
}

Tensor random_rows(int64_t B, int64_t L, uint32_t seed) {
  std::vector<float> v(size_t(B * L));
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = float(x >> 8) / float(1 << 24) * 4.0f - 2.0f;
  }
  return f32({B, L}, v);
}

TEST_F(TraceTest, BucketedResultsEqualTheUnpaddedComputation) {
  BucketOptions o;
  o.max_length = 40;
  o.warmup = 3;
  auto f = bucketed("masked", bucket_body, o);
  for (int64_t L : {7, 40, 1, 13, 12, 39, 2, 25, 7, 33}) {
    const Tensor x = random_rows(3, L, uint32_t(L));
    expect_unpadded(x, f({x}));
  }
  EXPECT_LE(f.programs(), 8);
  EXPECT_GT(f.stats().padded_positions, 0);  // some calls were padded, and still matched
}

// 1,000 random lengths: never more programs than the JIT's budget, and the padding is reported
// and far below padding everything to the longest length.
TEST_F(TraceTest, AThousandRandomLengthsCompileAtMostTheBudget) {
  BucketOptions o;
  o.max_length = 256;
  auto f = bucketed(
      "lengths",
      [](const std::vector<Tensor>& a, const Tensor& valid) {
        const int64_t L = a[0].shape()[1];
        return std::vector<Tensor>{sum(a[0] * broadcast_to(reshape(valid, {1, L}), {1, L}), {1})};
      },
      o);
  uint32_t x = 7;
  int64_t naive_padding = 0, real = 0;
  for (int i = 0; i < 1000; ++i) {
    x = x * 1664525u + 1013904223u;
    const int64_t L = 1 + int64_t((x >> 8) % 97) * int64_t((x >> 20) % 3 + 1) % 256;
    naive_padding += 256 - L;
    real += L;
    const Tensor row = Tensor(Array::full({1, L}, 1.0));
    EXPECT_FLOAT_EQ(f({row})[0].to_f32()[0], float(L));
  }
  const int64_t budget = current_jit()->program_budget();
  ASSERT_GT(budget, 0);
  EXPECT_LE(f.programs(), budget);
  EXPECT_EQ(f.programs(), int64_t(f.stats().buckets.size()));
  EXPECT_EQ(f.stats().calls, 1000);
  EXPECT_EQ(f.stats().real_positions, real);
  const double naive = double(naive_padding) / double(naive_padding + real);
  RecordProperty("padding_fraction", std::to_string(f.stats().padding_fraction()));
  RecordProperty("padding_to_max_length", std::to_string(naive));
  EXPECT_GT(f.stats().padding_fraction(), 0.0);
  EXPECT_LT(f.stats().padding_fraction(), 0.5 * naive)
      << "buckets " << f.stats().buckets.size() << ", naive " << naive;
}

// The bucket choice is the optimum: every set of at most k lengths (the top included) is tried.
TEST_F(TraceTest, ChosenBucketsMinimiseThePadding) {
  auto padding = [](const std::vector<int64_t>& lengths, const std::vector<int64_t>& buckets) {
    int64_t p = 0;
    for (int64_t l : lengths) p += *std::lower_bound(buckets.begin(), buckets.end(), l) - l;
    return p;
  };
  uint32_t x = 3;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int64_t> lengths;
    for (int i = 0; i < 12; ++i) {
      x = x * 1664525u + 1013904223u;
      lengths.push_back(1 + int64_t((x >> 8) % 20));
    }
    const int64_t top = 20, k = 1 + trial % 4;
    const std::vector<int64_t> chosen = choose_buckets(lengths, k, top);
    ASSERT_LE(int64_t(chosen.size()), k);
    ASSERT_EQ(chosen.back(), top);
    int64_t best = INT64_MAX;
    for (uint32_t mask = 0; mask < (1u << 19); ++mask) {
      if (__builtin_popcount(mask) > k - 1) continue;
      std::vector<int64_t> b;
      for (int64_t l = 1; l < top; ++l) {
        if (mask & (1u << (l - 1))) b.push_back(l);
      }
      b.push_back(top);
      best = std::min(best, padding(lengths, b));
    }
    EXPECT_EQ(padding(lengths, chosen), best) << "trial " << trial;
  }
  EXPECT_THROW(choose_buckets(std::vector<int64_t>{30}, 2, 20), InputError);
}

TEST_F(TraceTest, BucketedPlansFromKnownLengthsAndRefusesBadCalls) {
  BucketOptions o;
  o.max_length = 64;
  o.max_programs = 3;
  auto f = bucketed("known", bucket_body, o);
  const std::vector<int64_t> lengths = {5, 5, 6, 30, 31, 31, 64};
  f.plan(lengths);
  EXPECT_EQ(f.stats().buckets, choose_buckets(lengths, 3, 64));
  for (int64_t L : lengths) {
    const Tensor x = random_rows(2, L, uint32_t(L + 100));
    expect_unpadded(x, f({x}));
  }
  EXPECT_EQ(f.programs(), 3);
  EXPECT_THROW(f({random_rows(2, 65, 1)}), InputError);  // longer than max_length
  EXPECT_THROW(f({random_rows(2, 5, 1), random_rows(2, 6, 1)}), InputError);  // lengths differ
  BucketOptions none;
  EXPECT_THROW(bucketed("no-max", bucket_body, none), InputError);
}

}  // namespace
}  // namespace keel
