// A scan unit: a C++ loop over the trip count that calls the body's generated function with
// pointers to the i-th slices of the stacked xs and ys. Carries ping-pong between the result
// buffer and a spare one, starting where the last iteration ends in the result buffer. Nothing
// in the text depends on the trip count except the constant itself.
#include "backend/cpu/codegen_internal.h"
#include "ir/scan.h"

namespace keel::cpu::gen {
std::string emit_scan_loop(const Graph& g, const Buffers&, const Unit& u,
                           const std::string& body_fn, int64_t workspace_offset) {
  const Node& n = g.node(u.root);
  const ScanInfo s = scan_info(n.attrs, n.inputs.size());
  const Graph& body = *s.body;
  const auto m = static_cast<size_t>(s.carries), nx = static_cast<size_t>(s.xs);
  const size_t nin = n.inputs.size(), nout = static_cast<size_t>(s.results());
  std::string c = fmt::format("  // {} over {} iterations{}\n", describe(g, u.root), s.length,
                              s.reverse ? ", reversed" : "");
  c += fmt::format("  char* W = A + {};\n", workspace_offset);
  c += fmt::format("  constexpr int64_t L = {};\n", s.length);
  c += fmt::format("  const void* bin[{}];\n  void* bout[{}];\n", std::max<size_t>(nin, 1), nout);
  // The first buffer each carry starts in: the result buffer when L is even, else the spare.
  int64_t spare = 0;
  for (size_t k = 0; k < m; ++k) {
    const int64_t bytes = body.node(body.params()[k]).type.bytes();
    c += fmt::format(
        "  char* cur{0} = (L % 2 == 0) ? reinterpret_cast<char*>(v{1}) : W + {2};\n"
        "  char* nxt{0} = (L % 2 == 0) ? W + {2} : reinterpret_cast<char*>(v{1});\n",
        k, u.stores[k], spare);
    c += fmt::format("  __builtin_memcpy(cur{}, v{}, {});\n", k, n.inputs[k], bytes);
    spare += (bytes + 63) / 64 * 64;  // as passes::scan_carry_bytes with the CPU's target
  }
  for (size_t q = m + nx; q < nin; ++q) c += fmt::format("  bin[{}] = v{};\n", q, n.inputs[q]);
  c += "  for (int64_t it = 0; it < L; ++it) {\n";
  c += s.reverse ? "    const int64_t i = L - 1 - it;\n" : "    const int64_t i = it;\n";
  for (size_t k = 0; k < m; ++k)
    c += fmt::format("    bin[{0}] = cur{0};\n    bout[{0}] = nxt{0};\n", k);
  for (size_t j = 0; j < nx; ++j) {
    const int64_t bytes = body.node(body.params()[m + j]).type.bytes();
    c += fmt::format("    bin[{}] = reinterpret_cast<const char*>(v{}) + i * {};\n", m + j,
                     n.inputs[m + j], bytes);
  }
  for (size_t r = m; r < nout; ++r) {
    const int64_t bytes = body.node(body.outputs()[r]).type.bytes();
    c += fmt::format("    bout[{}] = reinterpret_cast<char*>(v{}) + i * {};\n", r, u.stores[r],
                     bytes);
  }
  c += fmt::format("    {}(k, bin, bout, W + {});\n", body_fn, spare);
  for (size_t k = 0; k < m; ++k)
    c += fmt::format("    {{ char* t = cur{0}; cur{0} = nxt{0}; nxt{0} = t; }}\n", k);
  c += "  }\n";
  return c;
}

}  // namespace keel::cpu::gen
