// Program outputs. A donated output (the graph writes output k into parameter a's buffer) is
// computed straight into that buffer when nothing reads the parameter afterwards, else into
// scratch and copied at the end; an output that is a donated parameter is copied before anything
// runs. Other outputs that are parameters, constants or repeats are copied at the end.
#include <algorithm>

#include "backend/cpu/codegen_internal.h"

namespace keel::cpu::gen {

void place_donated_outputs(const Graph& g, const std::vector<Unit>& units, Buffers& b) {
  b.into_param.assign(g.size(), -1);
  b.early_copy.assign(g.outputs().size(), 0);
  std::vector<char> donated(g.size(), 0);  // parameters some other value is written into
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const int32_t a = g.output_alias(k);
    if (a >= 0 && g.outputs()[k] != g.params()[static_cast<size_t>(a)]) {
      donated[g.params()[static_cast<size_t>(a)]] = 1;
    }
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const NodeId o = g.outputs()[k];
    const int32_t a = g.output_alias(k);
    // A donated parameter returned as an output is read before anything overwrites it.
    if (donated[o] && !(a >= 0 && g.params()[static_cast<size_t>(a)] == o)) b.early_copy[k] = 1;
    if (a < 0 || b.out_slot[o] != static_cast<int32_t>(k)) continue;
    const NodeId p = g.params()[static_cast<size_t>(a)];
    if (c_source::computable_in_place(g, *b.fusion, units, o, p)) {
      b.into_param[o] = p;
    } else {
      b.out_slot[o] = -1;  // scratch, then a copy at the end
    }
  }
}

OutputCopies output_copies(const Graph& g, const Buffers& b) {
  OutputCopies c;
  std::vector<NodeId> sources;
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const NodeId o = g.outputs()[k];
    const int32_t a = g.output_alias(k);
    const int64_t bytes = g.node(o).type.bytes();
    if (bytes == 0 || (a >= 0 && g.params()[static_cast<size_t>(a)] == o)) continue;
    const std::string dst =
        a >= 0 ? fmt::format("const_cast<void*>(in[{}])", a) : fmt::format("out[{}]", k);
    if (b.early_copy[k]) {
      sources.push_back(o);
      const int64_t t = b.early_temp[k];
      if (t < 0) {
        c.early += fmt::format("  __builtin_memcpy({}, v{}, {});  // output {} is %{}\n", dst, o,
                               bytes, k, o);
      } else {
        const int64_t off = b.arena_bytes + t;
        c.early += fmt::format("  __builtin_memcpy(A + {}, v{}, {});  // output {} is %{}\n", off,
                               o, bytes, k, o);
        c.late +=
            fmt::format("  __builtin_memcpy({}, A + {}, {});  // output {}\n", dst, off, bytes, k);
      }
    } else if (b.out_slot[o] != static_cast<int32_t>(k)) {
      sources.push_back(o);
      c.late += fmt::format("  __builtin_memcpy({}, v{}, {});  // output {} is %{}\n", dst, o,
                            bytes, k, o);
    }
  }
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  c.early = declare_buffers(g, b, sources) + c.early;
  return c;
}

}  // namespace keel::cpu::gen
