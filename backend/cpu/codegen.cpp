// The driver of code generation: the ABI header, the helpers, constants, then keel_run: copies
// of donated parameters returned as outputs, one call per unit in fusion-plan order (each run of
// loop units inside one OpenMP parallel region, kernels between) and, last, copies for outputs
// that need them. A scan's body, lowered once with its graph (Lowered::bodies), is generated
// once as its own function.
#include "backend/cpu/codegen.h"

#include <algorithm>

#include "backend/cpu/codegen_internal.h"
#include "backend/cpu/target.h"
#include "ir/scan.h"
#include "ir/text.h"

namespace keel::cpu {

namespace gen {

std::string emit_program(const passes::Lowered& lowered, const std::string& prefix,
                         std::string& defs, ProgramMemory& memory, SharedUnits& shared,
                         const CodegenOptions& options) {
  const Graph& g = lowered.graph;
  const std::vector<Unit> units = plan_units(g, lowered.fusion, lowered.options.target);
  Buffers b = assign_buffers(g, lowered.memory, lowered.fusion, units);
  b.prefix = prefix;
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.nodes()[id];
    if (b.needed[id] && n.op == Op::constant && numel(n.type.shape) > 0) {
      defs += constant_array(n.attrs.array("value"), fmt::format("{}c{}", prefix, id));
    }
  }
  // One function per unit: small functions keep the compiler's register allocation (which
  // grows faster than linearly with function size) from dominating compile time.
  std::string calls, run;   // `run`: consecutive team units, which share one parallel region
  bool run_shares = false;  // some unit of the run has work to share
  auto end_run = [&] {
    calls += run_shares ? cat("#pragma omp parallel\n  {\n", run, "  }\n") : run;
    run.clear();
    run_shares = false;
  };
  for (size_t i = 0; i < units.size(); ++i) {
    const Unit& u = units[i];
    std::string code;
    if (u.kind == UnitKind::Scan) {
      const Node& n = g.node(u.root);
      const auto lowered_body = lowered.bodies.find(u.root);
      if (lowered_body == lowered.bodies.end()) {
        throw Error(fmt::format(
            "[backend.cpu] internal: scan %{} of graph '{}' has no lowered body; lower the "
            "graph with cpu::lower",
            u.root, g.name()));
      }
      const passes::Lowered& body = *lowered_body->second;
      const std::string bp = fmt::format("{}s{}_", prefix, i);
      std::string body_defs;
      ProgramMemory body_memory;
      const std::string body_calls =
          emit_program(body, bp, body_defs, body_memory, shared, options);
      const int64_t body_arena = body_memory.arena_bytes;
      memory.kernel_scratch_bytes =
          std::max(memory.kernel_scratch_bytes, body_memory.kernel_scratch_bytes);
      defs += body_defs;
      defs += fmt::format(
          "__attribute__((noinline)) void {}run(const keel_kernels* k, const void* const* in,\n"
          "    void* const* out, char* A) {{\n"
          "  (void)k;\n  (void)in;\n  (void)out;\n  (void)A;\n",
          bp);
      defs += body_calls + "}\n\n";
      // The planned workspace (plan_memory sized it from the same lowered body), or codegen
      // scratch when the body needs scratch of its own.
      const int64_t align = lowered.options.target.alignment;
      const int64_t carries = passes::scan_carry_bytes(n, lowered.options.target);
      int64_t off = lowered.memory.offset[u.root];
      if (off < 0 || body_arena > body.memory.arena_bytes) {
        off = b.arena_bytes + b.scratch_bytes;
        b.scratch_bytes += (carries + body_arena + align - 1) / align * align;
      }
      code = emit_scan_loop(g, b, u, bp + "run", off);
    }
    const std::string declarations = declare_buffers(g, b, touched(g, b, u));
    TeamUse team_use = TeamUse::own_region;
    switch (u.kind) {
      case UnitKind::Loop:
        code = emit_loop(g, b, u, team_use);
        break;
      case UnitKind::Reduce:
        code = emit_reduce(g, b, u, team_use);
        break;
      case UnitKind::Kernel:
        code = emit_kernel(g, b, u, options);
        memory.kernel_scratch_bytes =
            std::max(memory.kernel_scratch_bytes, kernel_scratch_bytes(g, b, u.root, options));
        break;
      case UnitKind::Scan:
        break;
    }
    const std::string statements = shared.statements(declarations, code, defs);
    defs += fmt::format(
        "__attribute__((noinline)) void {}unit{}(const keel_kernels* k, const void* const* in,\n"
        "    void* const* out, char* A) {{\n"
        "  (void)k;\n  (void)in;\n  (void)out;\n  (void)A;\n{}}}\n\n",
        prefix, i, statements);
    const std::string call = fmt::format("  {}unit{}(k, in, out, A);\n", prefix, i);
    if (team_use == TeamUse::own_region) {
      end_run();
      calls += call;
    } else {
      run += call;
      run_shares = run_shares || team_use == TeamUse::team;
    }
  }
  end_run();
  const OutputCopies copies = output_copies(g, b);
  memory.arena_bytes = b.arena_bytes + b.scratch_bytes;
  memory.scratch_bytes = b.scratch_bytes;
  return copies.early + calls + copies.late;
}

}  // namespace gen

GeneratedSource generate_source(const passes::Lowered& lowered, const CodegenOptions& options) {
  using namespace gen;
  const Graph& g = lowered.graph;
  // Another target's views and joins would index memory the kernels here cannot, and the scan
  // loop spaces its spare carries as the CPU's target does.
  const passes::Target& t = lowered.options.target;
  const passes::Target& cpu = lowering_target();
  if (t.name != cpu.name || t.alignment != cpu.alignment ||
      t.scan_spare_carries != cpu.scan_spare_carries) {
    throw Error(fmt::format(
        "[backend.cpu] internal: graph '{}' was lowered for the target '{}' (alignment {}, "
        "spare scan carries {}); lower it with cpu::lower",
        g.name(), t.name, t.alignment, t.scan_spare_carries ? "yes" : "no"));
  }
  std::string s =
      fmt::format("// Generated by keel for graph {}; do not edit.\n", quoted_text(g.name()));
  s += kAbiHeaderText;
  s += kPrelude;
  s += c_source::kIntegerHelpers;
  s += "}  // namespace\n";
  s += "\nnamespace {\n";
  ProgramMemory memory;
  SharedUnits shared;
  const std::string run = emit_program(lowered, "", s, memory, shared, options);
  s += "}  // namespace\n\n";
  s += "extern \"C\" __attribute__((visibility(\"default\"))) uint32_t keel_abi_version(void) {\n"
       "  return KEEL_ABI_VERSION;\n}\n\n";
  s += "extern \"C\" __attribute__((visibility(\"default\"))) int keel_run(\n"
       "    const keel_kernels* k, const void* const* in, void* const* out, void* arena) {\n"
       "  if (k == nullptr || k->abi_version != KEEL_ABI_VERSION ||\n"
       "      k->struct_size < sizeof(keel_kernels)) {\n"
       "    return 1;  // a libkeel of another ABI: refuse rather than call the wrong table\n"
       "  }\n"
       "  char* A = static_cast<char*>(arena);\n";
  s += run;
  s += "  return 0;\n}\n";
  GeneratedSource out;
  out.text = std::move(s);
  out.arena_bytes = memory.arena_bytes;
  // Kernel scratch is allocated per call and freed after it: the largest one adds to the peak.
  out.predicted_peak_bytes =
      lowered.memory.predicted_peak_bytes + memory.scratch_bytes + memory.kernel_scratch_bytes;
  return out;
}

}  // namespace keel::cpu
