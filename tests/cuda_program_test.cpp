// The shape of CUDA programs (issue 49): a scan's body generated once and replayed per
// iteration over its slices, and products that add their addend themselves (cuBLASLt's C or
// its bias epilogue), each on the emulated GPU against the reference interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "backend/cuda/compiled_program.h"
#include "backend/cuda/device_client.h"
#include "backend/cuda/emulated_gpu.h"
#include "backend/cuda/settings.h"
#include "ir/scan.h"
#include "tests/backend_cpu_cases.h"
#include "tests/cuda_checks.h"
#include "tests/scan_graphs.h"

namespace keel {
namespace {

using cpu_test::Ints;
using cuda_test::expect_matches;
using cuda_test::with_gradients;

// A scan of L iterations: its body generated once, its launches replayed per iteration over that
// iteration's slices. The body holds a constant product operand (copied into scratch, named
// apart from the outer program's constants); the loop-invariant input is a constant (no device
// address: copied in); carries start in the spare buffer at odd L. Kernels do not grow with L.
cpu_test::TestProgram scan_program(int64_t length, bool reverse) {
  cpu_test::TestProgram p(fmt::format("scan_{}_{}", length, reverse));
  const int64_t B = 2, H = 8;
  const SourceLoc loc{"cuda_test.cpp", 1};
  auto body = std::make_shared<Graph>("body");
  const NodeId h = body->add_param({DType::f32, {B, H}}, loc);
  const NodeId x = body->add_param({DType::f32, {B, H}}, loc);
  const NodeId k = body->add_param({DType::f32, {H}}, loc);
  std::vector<float> w(H * H);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(i % 7) - 0.1f;
  const NodeId product =
      body->emit(Op::dot_general, {h, body->add_constant(Array::from_f32({H, H}, w), loc)},
                 scan_test::matmul_attrs(), loc);
  const NodeId h2 = body->emit(
      Op::tanh, {body->emit(Op::add, {body->emit(Op::add, {product, x}, {}, loc), k}, {}, loc)}, {},
      loc);
  body->set_outputs({h2, body->emit(Op::mul, {h2, k}, {}, loc), h});
  std::vector<float> kv(H);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = 0.5f + 0.125f * static_cast<float>(i);
  const std::vector<NodeId> r =
      emit_scan(p.g,
                {p.random(DType::f32, {B, H}), p.random(DType::f32, {length, B, H}),
                 p.g.add_constant(Array::from_f32({H}, kv))},
                scan_attrs(body, 1, 1, length, reverse), loc, "test");
  p.out(r[0], "final carry", cpu_test::kLoose);
  p.out(r[1], "ys", cpu_test::kLoose);
  p.out(r[2], "each iteration's input carry", cpu_test::kLoose);
  return p;
}

TEST(CudaHostShim, ScansReplayOneBodyPerIterationOverTheSameKernels) {
  auto client = cuda::make_host_shim_client();
  std::vector<size_t> kernels, launches;
  for (const auto& [length, reverse] :
       {std::pair{int64_t{1}, false}, std::pair{int64_t{6}, false}, std::pair{int64_t{6}, true}}) {
    cpu_test::TestProgram p = scan_program(length, reverse);
    const int64_t plans = client->device_counters().product_plans;
    std::unique_ptr<backend::Executable> exe = client->compile(p.g, {});
    // The body's product, once per iteration over the same shapes: one cuBLASLt plan.
    EXPECT_EQ(client->device_counters().product_plans - plans, 1) << p.g.name();
    const cuda::CompiledProgram& c = dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled();
    kernels.push_back(c.kernels.size());
    launches.push_back(c.program.launches.size());
    int products = 0;
    for (const cuda::Launch& l : c.program.launches) products += l.gemm ? 1 : 0;
    EXPECT_EQ(products, length) << p.g.name();
    expect_matches(*client, *exe, p);
  }
  EXPECT_EQ(kernels[0], kernels[1]);
  EXPECT_EQ(kernels[1], kernels[2]);
  EXPECT_GT(launches[1], launches[0]);
  // A bias from each iteration's slice of xs (12 bytes apart): a product in the body adds it
  // in a kernel, as cuBLASLt's epilogue needs a 16-byte aligned bias, which the emulated GPU
  // checks.
  {
    cpu_test::TestProgram p("scan_bias_slices");
    const SourceLoc loc{"cuda_test.cpp", 2};
    auto body = std::make_shared<Graph>("body");
    const NodeId h = body->add_param({DType::f32, {2, 3}}, loc);
    const NodeId bias = body->add_param({DType::f32, {3}}, loc);
    const NodeId w = body->add_param({DType::f32, {3, 3}}, loc);
    const NodeId product = body->emit(Op::dot_general, {h, w}, scan_test::matmul_attrs(), loc);
    body->set_outputs({body->emit(Op::add, {product, bias}, {}, loc)});
    const std::vector<NodeId> r = emit_scan(
        p.g,
        {p.random(DType::f32, {2, 3}), p.random(DType::f32, {5, 3}), p.random(DType::f32, {3, 3})},
        scan_attrs(body, 1, 1, 5, false), loc, "test");
    p.out(r[0], "final carry", cpu_test::kLoose);
    std::unique_ptr<backend::Executable> exe = client->compile(p.g, {});
    for (const cuda::Launch& l :
         dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled().program.launches) {
      if (l.gemm && l.gemm->addend == cuda::GemmCall::Addend::row_vector) {
        EXPECT_EQ(l.args[3].byte_offset % 16, 0) << l.what;
      }
    }
    expect_matches(*client, *exe, p);
  }
  // A scan inside a scan's body, forward and reversed, as gradient accumulation over scanned
  // layers has.
  for (bool reverse : {false, true}) {
    cpu_test::TestProgram p(fmt::format("nested_scan_{}", reverse));
    const std::vector<NodeId> r = scan_test::nested_scan(
        p.g, p.random(DType::f32, {2, 4}), p.random(DType::f32, {3, 2, 4, 4}, -0.5, 0.5),
        p.random(DType::f32, {4}), reverse);
    p.out(r[0], "final carry", cpu_test::kLoose);
    p.out(r[1], "ys", cpu_test::kLoose);
    std::unique_ptr<backend::Executable> exe = client->compile(p.g, {});
    expect_matches(*client, *exe, p);
  }
}

// A product read only by an add in the next unit: cuBLASLt adds a matrix (beta = 1) or a row
// vector (its bias epilogue) and stores the sum; the add's loop is not generated. Not when the
// product has another reader, or the loop computes more than the add.
TEST(CudaHostShim, ProductsAddAMatrixOrARowVectorThemselves) {
  auto dot = [](cpu_test::TestProgram& p, NodeId a, NodeId b) {
    return p.op(Op::dot_general, {a, b},
                {{"lhs_batch", Ints{}},
                 {"rhs_batch", Ints{}},
                 {"lhs_contract", Ints{2}},
                 {"rhs_contract", Ints{0}}});
  };
  auto client = cuda::make_host_shim_client();
  auto addends = [&](cpu_test::TestProgram& p) {
    std::unique_ptr<backend::Executable> exe = client->compile(p.g, {});
    const cuda::CudaProgram& program =
        dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled().program;
    std::vector<cuda::GemmCall::Addend> out;
    for (const cuda::Launch& l : program.launches) {
      if (l.gemm) out.push_back(l.gemm->addend);
    }
    expect_matches(*client, *exe, p);
    return std::pair{out, program.launches.size()};
  };
  using A = cuda::GemmCall::Addend;
  {
    cpu_test::TestProgram p("residual");
    const NodeId x = p.random(DType::f32, {2, 3, 8}), w = p.random(DType::f32, {8, 6});
    p.out(p.op(Op::add, {p.random(DType::f32, {2, 3, 6}), dot(p, x, w)}), "residual + x w");
    const auto [got, launches] = addends(p);
    EXPECT_EQ(got, std::vector<A>{A::matrix});
    EXPECT_EQ(launches, 1u);
    // cuda.product_addends = false: the add is a kernel of its own.
    backend::CompileOptions apart;
    auto settings = std::make_shared<cuda::Settings>();
    settings->product_addends = false;
    apart.backend_settings = settings;
    backend::CompileOptions joined;
    joined.backend_settings = std::make_shared<cuda::Settings>();
    EXPECT_NE(apart.fingerprint(), joined.fingerprint());  // the key tells them apart
    std::unique_ptr<backend::Executable> exe = client->compile(p.g, apart);
    const cuda::CudaProgram& program =
        dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled().program;
    ASSERT_EQ(program.launches.size(), 2u);
    EXPECT_EQ(program.launches[0].gemm->addend, A::none);
    expect_matches(*client, *exe, p);
  }
  {
    cpu_test::TestProgram p("bias");
    const NodeId x = p.random(DType::f32, {2, 3, 8}), w = p.random(DType::f32, {8, 6});
    p.out(p.op(Op::add, {dot(p, x, w), p.random(DType::f32, {6})}), "x w + bias");
    const NodeId broadcast =
        p.op(Op::broadcast, {p.random(DType::f32, {6})}, {{"shape", Ints{2, 3, 6}}});
    p.out(p.op(Op::add, {broadcast, dot(p, x, p.random(DType::f32, {8, 6}))}),
          "broadcast bias + x w");
    const auto [got, launches] = addends(p);
    EXPECT_EQ(got, (std::vector<A>{A::row_vector, A::row_vector}));
    EXPECT_EQ(launches, 2u);
  }
  {
    cpu_test::TestProgram p("not_alone");
    const NodeId x = p.random(DType::f32, {2, 3, 8}), w = p.random(DType::f32, {8, 6});
    const NodeId y = dot(p, x, w), r = p.random(DType::f32, {2, 3, 6});
    p.out(p.op(Op::add, {y, r}), "x w + r, x w also an output");
    p.out(y, "x w");
    p.out(p.op(Op::tanh, {p.op(Op::add, {dot(p, x, p.random(DType::f32, {8, 6})), r})}),
          "tanh(x w + r): more than the add");
    const NodeId column = p.random(DType::f32, {2, 3, 1});
    p.out(p.op(Op::add, {dot(p, x, p.random(DType::f32, {8, 6})), column}),
          "x w + a column: not a row vector");
    const auto [got, launches] = addends(p);
    EXPECT_EQ(got, (std::vector<A>{A::none, A::none, A::none}));
    EXPECT_GE(launches, 6u);
  }
}

// The activation of an MLP: GELU in the tanh form as nn::gelu writes it, erf's GELU (an op the
// matcher does not evaluate), or x * sigmoid(1.702 x) spelled in ops it does, whose shape is
// GELU's and whose values are not (the sample points must tell them apart).
enum class Activation { gelu_tanh, gelu_erf, sigmoid };

struct Mlp {
  NodeId y = -1;     // gelu(x w1 + b1) w2 + b2
  NodeId tanh = -1;  // the tanh inside gelu_tanh
};

Mlp mlp(cpu_test::TestProgram& p, Activation activation) {
  const SourceLoc loc{"cuda_program_test.cpp", 3};
  auto scalar = [&](double v) { return p.g.add_constant(Array::scalar(v), loc); };
  auto dot = [&](NodeId a, NodeId b) {
    return p.op(Op::dot_general, {a, b},
                {{"lhs_batch", Ints{}},
                 {"rhs_batch", Ints{}},
                 {"lhs_contract", Ints{2}},
                 {"rhs_contract", Ints{0}}});
  };
  const NodeId x = p.random(DType::f32, {2, 4, 16}), w1 = p.random(DType::f32, {16, 24}, -0.5, 0.5);
  const NodeId h = p.op(Op::add, {dot(x, w1), p.random(DType::f32, {24})});
  Mlp out;
  NodeId a = -1;
  switch (activation) {
    case Activation::gelu_tanh: {
      const NodeId cube =
          p.op(Op::mul, {p.op(Op::mul, {p.op(Op::mul, {scalar(0.044715), h}), h}), h});
      out.tanh = p.op(
          Op::tanh,
          {p.op(Op::mul, {scalar(std::sqrt(2.0 / std::numbers::pi)), p.op(Op::add, {h, cube})})});
      a = p.op(Op::mul, {p.op(Op::mul, {scalar(0.5), h}), p.op(Op::add, {scalar(1.0), out.tanh})});
      break;
    }
    case Activation::gelu_erf:
      a = p.op(Op::mul,
               {p.op(Op::mul, {scalar(0.5), h}),
                p.op(Op::add,
                     {scalar(1.0),
                      p.op(Op::erf, {p.op(Op::mul, {scalar(1.0 / std::numbers::sqrt2), h})})})});
      break;
    case Activation::sigmoid:
      // x / (1 + exp(-1.702 x)): ops the matcher evaluates, values GELU's only roughly.
      a = p.op(
          Op::div,
          {h, p.op(Op::add, {scalar(1.0), p.op(Op::exp, {p.op(Op::mul, {scalar(-1.702), h})})})});
      break;
  }
  out.y = p.op(Op::add,
               {dot(a, p.random(DType::f32, {24, 16}, -0.5, 0.5)), p.random(DType::f32, {16})});
  return out;
}

// A product plus a bias whose sum's only use is GELU (tanh form), and the backward's product
// whose only use is GELU's gradient: cuBLASLt's GELU epilogues (the forward's storing the sum
// the backward reads), the loops around them not generated, values and gradients as the
// reference's. Not for other functions, not where the loop's tanh is read elsewhere (then the
// gradient alone), not with cuda.gelu_epilogues = false.
TEST(CudaHostShim, GeluAfterAProductIsItsEpilogueForwardAndBackward) {
  using A = cuda::GemmCall::Activation;
  auto client = cuda::make_host_shim_client();
  struct Found {
    std::vector<A> activations;
    int aux = 0;
    size_t launches = 0;
  };
  auto compile = [&](cpu_test::TestProgram& p, bool epilogues = true) {
    backend::CompileOptions options;
    auto settings = std::make_shared<cuda::Settings>();
    settings->gelu_epilogues = epilogues;
    options.backend_settings = settings;
    std::unique_ptr<backend::Executable> exe = client->compile(p.g, options);
    const cuda::CudaProgram& program =
        dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled().program;
    // What the executable cache stores loads back the same (and its layouts are checked).
    const cuda::CompiledProgram back = cuda::deserialize_program(
        cuda::serialize_program(dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled()));
    Found f;
    f.launches = program.launches.size();
    for (size_t i = 0; i < program.launches.size(); ++i) {
      const cuda::Launch& l = program.launches[i];
      if (!l.gemm || l.gemm->activation == A::none) continue;
      f.activations.push_back(l.gemm->activation);
      f.aux += l.gemm->aux;
      EXPECT_EQ(back.program.launches.at(i).gemm->activation, l.gemm->activation);
      EXPECT_EQ(back.program.launches.at(i).gemm->aux, l.gemm->aux);
      EXPECT_EQ(back.program.launches.at(i).args, l.args);
    }
    expect_matches(*client, *exe, p);
    return f;
  };
  {
    cpu_test::TestProgram forward("gelu_forward");
    forward.out(mlp(forward, Activation::gelu_tanh).y, "mlp", cpu_test::kLoose);
    const Found f = compile(forward);
    EXPECT_EQ(f.activations, std::vector<A>{A::gelu});
    EXPECT_EQ(f.aux, 0) << "nothing reads the sum: it is not stored";
    EXPECT_EQ(f.launches, 2u) << "two products, with their bias and GELU";
  }
  size_t with = 0;
  for (bool epilogues : {true, false}) {
    cpu_test::TestProgram p("gelu_training");
    const NodeId y = mlp(p, Activation::gelu_tanh).y;
    cpu_test::TestProgram vg = with_gradients(p, {y});
    const Found f = compile(vg, epilogues);
    if (!epilogues) {
      cuda::Settings off, on;
      off.gelu_epilogues = false;
      EXPECT_NE(off.fingerprint(), on.fingerprint());  // the key tells them apart
      EXPECT_TRUE(f.activations.empty());
      EXPECT_GT(f.launches, with + 1) << "the two loops the epilogues replace";
      continue;
    }
    EXPECT_EQ(f.activations, (std::vector<A>{A::gelu, A::gelu_gradient}));
    EXPECT_EQ(f.aux, 2) << "the forward stores the sum, the backward reads it";
    with = f.launches;
  }
  {
    cpu_test::TestProgram p("gelu_tanh_read");
    const Mlp m = mlp(p, Activation::gelu_tanh);
    cpu_test::TestProgram vg = with_gradients(p, {m.y});
    vg.out(m.tanh, "the tanh, an output", cpu_test::kLoose);  // the forward's nodes keep their ids
    EXPECT_EQ(compile(vg).activations, std::vector<A>{A::gelu_gradient});
  }
  for (Activation other : {Activation::gelu_erf, Activation::sigmoid}) {
    cpu_test::TestProgram p(fmt::format("not_gelu_tanh_{}", static_cast<int>(other)));
    cpu_test::TestProgram vg = with_gradients(p, {mlp(p, other).y});
    EXPECT_TRUE(compile(vg).activations.empty()) << p.g.name();
  }
}

// Donation on the GPU, as on the CPU: outputs aliased to parameters are written into the
// arguments' memory and returned as it. An AdamW-like update and a residual product (cuBLASLt's C
// in place of D) are computed in place; a product that reads its own parameter goes through a
// temp and a copy at the end; a swap, an identity, an undonated copy of a donated parameter
// (saved before anything overwrites it) and a repeat hold their values. Only the undonated
// outputs take new memory. Two calls in a row, checked against the reference on copies.
TEST(CudaHostShim, DonatedOutputsAreWrittenIntoTheirArguments) {
  cpu_test::TestProgram p("donation", 5);
  const NodeId w = p.random(DType::f32, {4096}), m = p.random(DType::f32, {4096});
  const NodeId g = p.random(DType::f32, {4096}), sq = p.random(DType::f32, {8, 8});
  const NodeId a = p.random(DType::f32, {3}), b = p.random(DType::f32, {3});
  const NodeId same = p.random(DType::f32, {5});
  const NodeId x = p.random(DType::f32, {6, 8}), r = p.random(DType::f32, {6, 8});
  auto k = [&](double v) { return p.g.add_constant(Array::scalar(v)); };
  const NodeId m2 = p.op(Op::add, {p.op(Op::mul, {m, k(0.9)}), p.op(Op::mul, {g, k(0.1)})});
  const NodeId w2 = p.op(Op::sub, {w, p.op(Op::mul, {m2, p.op(Op::mul, {w, k(0.01)})})});
  const Attrs matmul = {{"lhs_batch", Ints{}},
                        {"rhs_batch", Ints{}},
                        {"lhs_contract", Ints{1}},
                        {"rhs_contract", Ints{0}}};
  p.out(w2, "w");                                                                // 0 -> w
  p.out(m2, "m");                                                                // 1 -> m
  p.out(p.op(Op::dot_general, {sq, sq}, matmul), "sq", cpu_test::kLoose);        // 2 -> sq
  p.out(b, "swap a");                                                            // 3 -> a
  p.out(a, "swap b");                                                            // 4 -> b
  p.out(same, "identity");                                                       // 5 -> same
  p.out(p.op(Op::add, {r, p.op(Op::dot_general, {x, sq}, matmul)}), "r + x sq",  // 6 -> r
        cpu_test::kLoose);
  p.out(w, "old w");     // 7: undonated
  p.out(m2, "m again");  // 8: a repeat
  // Parameters: w 0, m 1, g 2, sq 3, a 4, b 5, same 6, x 7, r 8.
  const std::vector<int32_t> into = {0, 1, 3, 4, 5, 6, 8};
  for (size_t i = 0; i < into.size(); ++i) p.g.set_output_alias(i, into[i]);
  auto client = cuda::make_host_shim_client();
  const backend::Device device = client->devices().at(0);
  std::unique_ptr<backend::Executable> exe = client->compile(p.g, {});
  const cuda::CudaProgram& program =
      dynamic_cast<const cuda::DeviceExecutable&>(*exe).compiled().program;
  EXPECT_EQ(program.aliases, p.g.output_aliases());
  using Kind = cuda::Slot::Kind;
  auto copied_to = [](const std::vector<cuda::Copy>& copies, cuda::Slot to) {
    return std::count_if(copies.begin(), copies.end(),
                         [&](const cuda::Copy& c) { return c.to == to; });
  };
  for (int32_t out : {0, 1, 5, 6}) {  // in place, or the argument itself
    EXPECT_EQ(copied_to(program.copies_after, {Kind::output, out, 0}), 0) << out;
  }
  EXPECT_EQ(copied_to(program.copies_after, {Kind::output, 2, 0}), 1);   // sq: from a temp
  EXPECT_EQ(copied_to(program.copies_before, {Kind::output, 7, 0}), 1);  // old w: first
  EXPECT_EQ(program.copies_before.size(), 3u);  // old w, and the swap's two through temps
  bool residual_in_place = false;
  for (const cuda::Launch& l : program.launches) {
    if (l.gemm && l.gemm->addend == cuda::GemmCall::Addend::matrix) {
      residual_in_place = l.args[2] == cuda::Slot{Kind::input, 8, 0} && l.args[3] == l.args[2];
    }
  }
  EXPECT_TRUE(residual_in_place) << "r + x sq: cuBLASLt's C in place of D, in r's memory";
  std::vector<Array> inputs = p.inputs;
  std::vector<backend::Buffer> args = cpu_test::buffers(*client, inputs);
  for (int call = 0; call < 2; ++call) {
    std::vector<Array> copies;
    for (const Array& v : inputs) copies.push_back(v.clone());
    const std::vector<Array> want = ref::interpret(p.g, copies);
    std::vector<const void*> memory;
    for (const backend::Buffer& v : args) memory.push_back(v.address());
    const int64_t in_use = client->memory_stats(device).bytes_in_use;
    const std::vector<backend::Buffer> got = exe->execute(args);
    EXPECT_EQ(client->memory_stats(device).bytes_in_use - in_use, 2 * 4096 * 4)
        << "only the two undonated outputs take memory";
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const auto& [name, tol] = p.checks[i];
      EXPECT_EQ(cpu_test::difference(cpu_test::host_value(got[i]), want[i], tol), "") << name;
      const int32_t alias = p.g.output_alias(i);
      if (alias >= 0) {
        EXPECT_EQ(got[i].address(), memory[static_cast<size_t>(alias)]) << name;
        args[static_cast<size_t>(alias)] = got[i];
        inputs[static_cast<size_t>(alias)] = cpu_test::host_value(got[i]);
      }
    }
  }
  // A donated buffer that is also another argument would change under the program: refused.
  std::vector<backend::Buffer> twice = args;
  twice[2] = twice[0];
  try {
    exe->execute(twice);
    ADD_FAILURE() << "a donated buffer passed twice was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(cuda_test::has(e.what(),
                               "input 0 is donated (written in place) and input 2 is "
                               "the same buffer"))
        << e.what();
  }
  // The aliases and both lists of copies travel in the executable; a bad alias is refused.
  const std::string bytes = exe->serialize();
  const cuda::CompiledProgram back = cuda::deserialize_program(bytes);
  EXPECT_EQ(back.program.aliases, program.aliases);
  ASSERT_EQ(back.program.copies_before.size(), program.copies_before.size());
  EXPECT_EQ(back.program.copies_before[0].to, program.copies_before[0].to);
  EXPECT_EQ(back.program.copies_after.size(), program.copies_after.size());
  std::string retyped = bytes;
  const std::string aliases = "\"aliases\":[0,1,3,";
  ASSERT_NE(retyped.find(aliases), std::string::npos);
  retyped.replace(retyped.find(aliases), aliases.size(), "\"aliases\":[0,7,3,");  // x: [6, 8]
  try {
    cuda::deserialize_program(retyped);
    ADD_FAILURE() << "an output aliased to an input of another type loaded";
  } catch (const InputError& e) {
    EXPECT_TRUE(cuda_test::has(e.what(), "'aliases' entry 1 is not -1 or a free input of its type"))
        << e.what();
  }
}

}  // namespace
}  // namespace keel
