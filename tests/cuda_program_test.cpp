// The shape of CUDA programs (issue 49): a scan's body generated once and replayed per
// iteration over its slices, and products that add their addend themselves (cuBLASLt's C or
// its bias epilogue), each on the emulated GPU against the reference interpreter.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace keel
