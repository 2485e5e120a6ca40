#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "ir/diff.h"
#include "ir/text.h"
#include "keel.h"
#include "tests/subprocess.h"

namespace keel {
namespace {

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override { set_default_executor(ref::make_executor()); }
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
  EXPECT_NE(f.programs()[0]->key, f.programs()[1]->key);
  EXPECT_EQ(f.programs()[0]->signature, "T|f32[2]");
}

TEST_F(TraceTest, ScalarChangesValueNotProgram) {
  auto step = compile("step", [](const Tensor& w, const Scalar& lr) { return w - lr * w; });
  Tensor w = f32({2}, {1, 2});
  EXPECT_EQ(step(w, Scalar(0.5)).to_f32(), (std::vector<float>{0.5, 1}));
  EXPECT_EQ(step(w, Scalar(0.25)).to_f32(), (std::vector<float>{0.75, 1.5}));
  EXPECT_EQ(step.stats().traces, 1);
}

TEST_F(TraceTest, NestedStructuresRoundTrip) {
  using Params = std::map<std::string, Tensor>;
  auto f = compile("f", [](const Params& p, const std::vector<Tensor>& xs) {
    return std::make_pair(p.at("b") + xs[0], std::vector<Tensor>{p.at("a") * xs[1]});
  });
  Params p{{"a", f32({1}, {2})}, {"b", f32({1}, {3})}};
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
  EXPECT_NE(pa.key, pb.key);
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

std::string run_probe(const char* scale, const char* fill) {
  std::string cmd = std::string(KEEL_BINARY_DIR) + "/tests/key_probe " + scale + " " + fill;
  testing_support::CommandResult r = testing_support::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd;
  return r.output;
}

std::string key_of(const std::string& probe) {
  return probe.substr(4, 32);
}
std::string text_of(const std::string& probe) {
  return probe.substr(probe.find("graph "));
}

TEST(KeyStability, SameProgramInTwoProcessesHasTheSameKey) {
  std::string a = run_probe("2", "1");
  std::string b = run_probe("2", "1");
  ASSERT_EQ(a.rfind("key ", 0), 0u) << a;
  EXPECT_EQ(key_of(a), key_of(b));
  EXPECT_EQ(a, b);
}

TEST(KeyStability, DifferentInputValuesGiveTheSameKey) {
  std::string a = run_probe("2", "1");
  std::string b = run_probe("2", "7");
  EXPECT_EQ(key_of(a), key_of(b));
  EXPECT_NE(a.substr(0, a.find("graph ")), b.substr(0, b.find("graph ")));  // values differ
}

TEST(KeyStability, ChangedConstantChangesKeyAndNamesItsLine) {
  std::string a = run_probe("2", "1");
  std::string b = run_probe("3", "1");
  EXPECT_NE(key_of(a), key_of(b));
  std::string why = explain_difference(parse_graph(text_of(a)), parse_graph(text_of(b)));
  std::string line = a.substr(a.find("line ") + 5, a.find("\nvalue") - a.find("line ") - 5);
  EXPECT_NE(why.find("key_probe.cpp:" + line), std::string::npos) << why;
  EXPECT_NE(why.find("2 -> 3"), std::string::npos) << why;
}

}  // namespace
}  // namespace keel
