// One startup-order scenario per process, since the contract is about what happens before and
// after a process's runtime exists. Prints "ok" and exits 0, or lets the error end the process
// (message on stderr, exit 1). Usage: startup_worker SCENARIO
#include <cstdio>
#include <cstdlib>
#include <string>

#include "keel.h"

namespace {

keel::policy::LaunchPolicy test_policy() {
  keel::policy::PolicySources s;
  s.sets = {"launch.backend=ref", "compile_cache.mode=off"};
  return keel::policy::resolve_policy(s);
}

void run(const std::string& scenario) {
  using namespace keel;
  if (scenario == "tensor-before-init") {
    Tensor t(Array::full({2}, 1.0));  // marker:before-init (the line the error names)
  } else if (scenario == "scalar-before-init") {
    Scalar lr(0.1);
  } else if (scenario == "lifecycle") {
    std::printf("%s\n", startup_phase_name(startup_phase()));
    {
      Runtime rt(test_policy());
      std::printf("%s\n", startup_phase_name(rt.phase()));
      Tensor t(Array::full({2}, 1.0));
      std::printf("%s\n", startup_phase_name(rt.phase()));
    }
    std::printf("%s\n", startup_phase_name(startup_phase()));
    Runtime again(test_policy());  // a process may start a runtime again after shutdown
    Tensor t(Array::full({2}, 1.0));
  } else if (scenario == "policy-after-init") {
    Runtime rt(test_policy());
    rt.update_policy("cpu.opt_level=3");
  } else if (scenario == "env-after-init") {
    Runtime rt(test_policy());
    auto f = compile("f", [](const Tensor& x) { return x * 2.0; });
    f(Tensor(Array::full({2}, 1.0)));
    ::setenv("KEEL_CPU_OPT_LEVEL", "3", 1);  // too late: the policy is frozen
    f(Tensor(Array::full({3}, 1.0)));        // a new program: the change is caught here
  } else if (scenario == "spmd-before-tensors") {
    Runtime rt(test_policy());
    rt.enable_spmd(runtime::Mesh{{"data", "model"}, {1, 1}});
    Tensor t(Array::full({2}, 1.0));
    std::printf("%s %d\n", rt.mesh().str().c_str(), rt.spmd() ? 1 : 0);
  } else if (scenario == "spmd-after-tensors") {
    Runtime rt(test_policy());
    Tensor t(Array::full({2}, 1.0));  // marker:first-tensor
    rt.enable_spmd(runtime::Mesh{{"data"}, {1}});
  } else if (scenario == "mesh-after-tensors") {
    Runtime rt(test_policy());
    Scalar s(1.0);
    rt.set_mesh(runtime::Mesh{{"batch"}, {1}});
  } else if (scenario == "mesh-too-big") {
    Runtime rt(test_policy());
    rt.enable_spmd(runtime::Mesh{{"data"}, {4}});
  } else if (scenario == "two-runtimes") {
    Runtime a(test_policy());
    Runtime b(test_policy());
  } else if (scenario == "feature-error") {
    policy::PolicySources s;
    s.sets = {"launch.backend=ref", "compile_cache.mode=off", "features.request=bf16_matmul",
              "features.on_unavailable=error"};
    Runtime rt(policy::resolve_policy(s));
  } else if (scenario == "feature-warn") {
    policy::PolicySources s;
    s.sets = {"launch.backend=ref", "compile_cache.mode=off", "features.request=bf16_matmul"};
    Runtime rt(policy::resolve_policy(s));
    std::printf("fallbacks %zu\n", rt.fallbacks().size());
  } else if (scenario == "memory-budget") {
    policy::PolicySources s;
    s.sets = {"launch.backend=ref", "compile_cache.mode=off", "launch.memory_budget_bytes=64"};
    Runtime rt(policy::resolve_policy(s));
    auto f = compile("big", [](const Tensor& x) { return x * 2.0; });
    f(Tensor(Array::full({1024}, 1.0)));
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: startup_worker SCENARIO\n");
    return 2;
  }
  try {
    run(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
