// Traces one small program and prints its graph hash and canonical text, so a test can compare
// programs traced in separate processes. Usage: key_probe SCALE FILL
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ir/text.h"
#include "keel.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: key_probe SCALE FILL\n");
    return 2;
  }
  double scale = std::atof(argv[1]);
  double fill = std::atof(argv[2]);
  keel::policy::PolicySources sources;
  sources.sets = {"launch.backend=ref", "compile_cache.mode=off"};
  keel::Runtime runtime(keel::policy::resolve_policy(sources));
  int constant_line = 0;
  auto f = keel::compile("probe", [&](const keel::Tensor& x, const keel::Scalar& lr) {
    constant_line = __LINE__ + 1;
    keel::Tensor y = keel::tanh(x) * scale;  // the constant that a test changes
    return keel::sum(y * lr);
  });
  keel::Tensor x(keel::Array::full({3, 4}, fill));
  keel::Tensor out = f(x, keel::Scalar(0.1));
  const keel::Program& p = *f.programs().at(0);
  std::printf("graph hash %s\nline %d\nvalue %.6f\n%s", p.graph_hash.hex().c_str(), constant_line,
              out.item(), keel::print_graph(p.graph).c_str());
  return 0;
}
