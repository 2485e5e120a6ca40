#pragma once
// Helpers for backend_cpu_test: tolerances, comparison, and TestProgram, which collects many
// checked outputs into one graph (each compile costs seconds, so cases share programs).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/client.h"
#include "backend/ref/interpreter.h"
#include "ir/error.h"
#include "tests/uniform_real.h"

namespace keel::cpu_test {

using Ints = std::vector<int64_t>;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct Tol {
  double rtol, atol;
  bool scaled = false;  // atol times the largest |ref| of the output (sums, long chains)
};
inline constexpr Tol kF32{1e-5, 1e-6}, kBF16{1e-2, 1e-2}, kLoose{1e-4, 1e-4, true};

inline Tol tol_for(DType t) {
  return t == DType::bf16 ? kBF16 : kF32;
}

// Compares dtype, shape and every element; returns "" or the first difference.
inline std::string difference(const Array& got, const Array& want, Tol tol) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return fmt::format("got {}{} want {}{}", dtype_name(got.dtype()), shape_str(got.shape()),
                       dtype_name(want.dtype()), shape_str(want.shape()));
  }
  double scale = 1;
  for (int64_t i = 0; i < want.numel() && tol.scaled && is_float(want.dtype()); ++i) {
    if (std::isfinite(want.get_f64(i))) scale = std::max(scale, std::fabs(want.get_f64(i)));
  }
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (!is_float(want.dtype())) {
      if (got.get_i64(i) != want.get_i64(i)) {
        return fmt::format("element {}: got {} want {}", i, got.get_i64(i), want.get_i64(i));
      }
      continue;
    }
    const double g = got.get_f64(i), w = want.get_f64(i);
    const bool ok = std::isnan(w) ? std::isnan(g)
                    : std::isinf(w)
                        ? g == w
                        : std::fabs(g - w) <= tol.atol * scale + tol.rtol * std::fabs(w);
    if (!ok) return fmt::format("element {}: got {} want {}", i, g, w);
  }
  return "";
}

inline backend::Client& cpu_client() {
  static std::shared_ptr<backend::Client> client = cpu::make_cpu_client();
  return *client;
}

// `arrays` on `client`'s first device.
inline std::vector<backend::Buffer> buffers(backend::Client& client,
                                            const std::vector<Array>& arrays) {
  std::vector<backend::Buffer> out;
  for (const Array& a : arrays) out.push_back(client.to_device(a, client.devices().at(0)));
  return out;
}
// A buffer's value, copied to the host once the copy is there.
inline Array host_value(const backend::Buffer& b) {
  return b.to_host().get();
}
inline std::vector<backend::Buffer> buffers(const std::vector<Array>& arrays) {
  return buffers(cpu_client(), arrays);
}

// One program with many checked outputs: each compile costs a second or two, so cases share.
class TestProgram {
 public:
  explicit TestProgram(std::string name, uint64_t seed = 1) : g(std::move(name)), rng_(seed) {}

  NodeId param(Array value) {
    inputs.push_back(std::move(value));
    return g.add_param({inputs.back().dtype(), inputs.back().shape()});
  }
  // Random values in [lo, hi] (integers: rounded; bool: 0/1).
  NodeId random(DType t, Shape s, double lo = -2, double hi = 2) {
    Array a(t, std::move(s));
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double v = testing_support::uniform_real(rng_, lo, hi);
      if (t == DType::boolean) {
        a.set_i64(i, v > (lo + hi) / 2);
      } else {
        a.set_f64(i, is_float(t) ? v : std::round(v));
      }
    }
    return param(std::move(a));
  }
  NodeId values(DType t, const std::vector<double>& v) {
    Array a(t, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) a.set_f64(static_cast<int64_t>(i), v[i]);
    return param(std::move(a));
  }
  NodeId ints(DType t, const Ints& v) {
    return param(Array::from_i64({static_cast<int64_t>(v.size())}, v, t));
  }
  NodeId op(Op op, std::vector<NodeId> in, Attrs attrs = {}) {
    return g.emit(op, std::move(in), std::move(attrs), SourceLoc{"backend_cpu_test.cpp", 1},
                  "test");
  }
  void out(NodeId id, const std::string& name, std::optional<Tol> tol = {}) {
    g.add_output(id);
    checks.push_back({name, tol ? *tol : tol_for(g.node(id).type.dtype)});
  }

  Graph g;
  std::vector<Array> inputs;
  std::vector<std::pair<std::string, Tol>> checks;

 private:
  std::mt19937_64 rng_;
};

// Compiles on `client`, runs there and on the reference interpreter, compares every output;
// returns the client's outputs. KEEL_CPU_TEST_DUMP=<dir> keeps every pass dump and generated
// source there.
inline std::vector<Array> check(backend::Client& client, const TestProgram& p,
                                backend::CompileOptions options = {}) {
  if (const char* dump = std::getenv("KEEL_CPU_TEST_DUMP")) options.passes.dump_dir = dump;
  std::unique_ptr<backend::Executable> exe = client.compile(p.g, options);
  std::vector<Array> want = ref::interpret(p.g, p.inputs);
  std::vector<backend::Buffer> got = exe->execute(buffers(client, p.inputs));
  EXPECT_EQ(got.size(), want.size());
  std::vector<Array> out;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const auto& [name, tol] = p.checks.at(i);
    out.push_back(host_value(got[i]));
    EXPECT_EQ(difference(out.back(), want[i], tol), "") << p.g.name() << ": " << name;
  }
  return out;
}
// The same on the compiled CPU backend.
inline std::vector<Array> check(const TestProgram& p, backend::CompileOptions options = {}) {
  return check(cpu_client(), p, std::move(options));
}

inline Attrs reduce_attrs(Ints axes, int64_t keep) {
  return {{"axes", axes}, {"keepdims", keep}};
}

}  // namespace keel::cpu_test
