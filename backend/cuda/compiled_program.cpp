#include "backend/cuda/compiled_program.h"

#include <fmt/format.h>

#include <cstdlib>
#include <limits>
#include <set>

#include "backend/cuda/codegen.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/settings.h"
#include "backend/cuda/target.h"
#include "backend/executable_bytes.h"
#include "ir/error.h"
#include "ir/utf8_escape.h"

namespace keel::cuda {
namespace {

using nlohmann::json;
constexpr std::string_view kRoom = "backend.cuda";

[[noreturn]] void bad(const std::string& why) {
  backend::bad_executable(kRoom, why);
}

json slot_json(const Slot& s) {
  return json::array({static_cast<int>(s.kind), s.index, s.byte_offset});
}

json layout_json(const MatrixLayout& l) {
  return {{"rows", l.rows},
          {"cols", l.cols},
          {"row_stride", l.row_stride},
          {"col_stride", l.col_stride},
          {"batch_offsets", l.batch_offsets}};
}

// An integer field within [lo, hi].
int64_t integer(const json& j, const char* field, const std::string& where,
                int64_t lo = std::numeric_limits<int64_t>::min(),
                int64_t hi = std::numeric_limits<int64_t>::max()) {
  if (!j.is_object() || !j.contains(field) || !j[field].is_number_integer() ||
      (j[field].is_number_unsigned() &&
       j[field].get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    bad(fmt::format("{} has no integer '{}'", where, field));
  }
  const int64_t v = j[field].get<int64_t>();
  if (v < lo || v > hi)
    bad(fmt::format("{} has '{}' = {}, outside [{}, {}]", where, field, v, lo, hi));
  return v;
}

void require_object(const json& j, const std::string& where) {
  if (!j.is_object()) bad(where + " is not an object");
}

std::string text(const json& j, const char* field, const std::string& where) {
  if (!j.is_object() || !j.contains(field) || !j[field].is_string()) {
    bad(fmt::format("{} has no string '{}'", where, field));
  }
  return j[field].get<std::string>();
}

// A place inside the buffers of `p`: an input or output that exists, an arena offset inside it.
Slot parse_slot(const json& j, const CudaProgram& p, const std::string& where) {
  if (!j.is_array() || j.size() != 3) bad(where + " is not [kind, index, byte offset]");
  const json entry = {{"kind", j[0]}, {"index", j[1]}, {"offset", j[2]}};
  const int64_t kind = integer(entry, "kind", where, 0, 2);
  const int64_t index = integer(entry, "index", where, 0, std::numeric_limits<int32_t>::max());
  const int64_t offset = integer(entry, "offset", where, 0);
  const Slot s{static_cast<Slot::Kind>(kind), static_cast<int32_t>(index), offset};
  const size_t count = s.kind == Slot::Kind::input    ? p.inputs.size()
                       : s.kind == Slot::Kind::output ? p.outputs.size()
                                                      : 1;
  if (static_cast<size_t>(index) >= count || bytes_after(p, s) < 0) {
    bad(where + " names a place outside the program's buffers");
  }
  return s;
}

// Per output, the input it is written into or -1: an input of its type, each at most once.
std::vector<int32_t> parse_aliases(const json& h, const CudaProgram& p) {
  if (!h.contains("aliases") || !h["aliases"].is_array() ||
      h["aliases"].size() != p.outputs.size()) {
    bad("header field 'aliases' is missing or not one entry per output");
  }
  std::vector<int32_t> out;
  std::vector<char> taken(p.inputs.size(), 0);
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const json& a = h["aliases"][k];
    const int64_t i = a.is_number_integer() ? a.get<int64_t>() : -2;
    const bool ok = i == -1 || (i >= 0 && static_cast<size_t>(i) < p.inputs.size() &&
                                !taken[static_cast<size_t>(i)] &&
                                p.inputs[static_cast<size_t>(i)] == p.outputs[k]);
    if (!ok)
      bad(fmt::format("header field 'aliases' entry {} is not -1 or a free input of its type", k));
    if (i >= 0) taken[static_cast<size_t>(i)] = 1;
    out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

// Copies from inside one buffer to inside another.
std::vector<Copy> parse_copies(const json& h, const std::string& field, const CudaProgram& p) {
  if (!h.contains(field) || !h[field].is_array())
    bad(fmt::format("header field '{}' is missing", field));
  std::vector<Copy> out;
  for (size_t i = 0; i < h[field].size(); ++i) {
    const json& e = h[field][i];
    const std::string where = fmt::format("{} entry {}", field, i);
    require_object(e, where);
    Copy c;
    c.from = parse_slot(e.contains("from") ? e["from"] : json(), p, where + " 'from'");
    c.to = parse_slot(e.contains("to") ? e["to"] : json(), p, where + " 'to'");
    c.bytes = integer(e, "bytes", where, 0);
    const bool apart = c.from.kind != c.to.kind || c.from.index != c.to.index ||
                       c.from.byte_offset + c.bytes <= c.to.byte_offset ||
                       c.to.byte_offset + c.bytes <= c.from.byte_offset;
    if (c.bytes > bytes_after(p, c.from) || c.bytes > bytes_after(p, c.to) || !apart) {
      bad(where + " reaches past its buffers or onto its own bytes");
    }
    out.push_back(c);
  }
  return out;
}

MatrixLayout parse_layout(const json& j, const std::string& where) {
  require_object(j, where);
  MatrixLayout l{integer(j, "rows", where),
                 integer(j, "cols", where),
                 integer(j, "row_stride", where),
                 integer(j, "col_stride", where),
                 {}};
  if (!j.contains("batch_offsets") || !j["batch_offsets"].is_array()) {
    bad(where + " has no batch offsets");
  }
  for (const json& o : j["batch_offsets"]) {
    if (!o.is_number_integer() || o.get<int64_t>() < 0) bad(where + " has a bad batch offset");
    l.batch_offsets.push_back(o.get<int64_t>());
  }
  if (!GemmCall::blas_layout(l)) bad(where + " is a layout cuBLASLt cannot take");
  return l;
}

}  // namespace

CudaProgram generate_program(const Graph& graph, const backend::CompileOptions& options,
                             const std::string& arch) {
  passes::PassOptions passes = options.passes;
  passes.bf16_matmul = options.matmul_precision == "bf16";
  passes::Lowered lowered = cuda::lower(graph, passes);
  lowered.graph.set_name(graph.name());
  // bf16 wmma needs Ampere or later: sm_80 and up.
  const bool ampere = arch.size() >= 5 && std::atoi(arch.c_str() + 3) >= 80;
  CudaProgram program =
      generate_program(lowered, {passes.bf16_matmul && ampere, settings_of(options).product_addends,
                                 settings_of(options).gelu_epilogues});
  if (options.before_build) options.before_build(program.predicted_peak_bytes);
  return program;
}

CompiledProgram compile_generated(CudaProgram program, const std::string& toolkit_dir,
                                  const std::string& arch) {
  Cubin cubin = Nvrtc::load(toolkit_dir).compile(program.source, program.graph_name, arch);
  for (const KernelResources& k : cubin.kernels) {
    if (k.spills()) {
      throw Error(fmt::format(
          "[backend.cuda] kernel {} of {} spills registers on {}: {} bytes "
          "spill stores, {} bytes spill loads ({} registers)",
          k.name, program.graph_name, arch, k.spill_store_bytes, k.spill_load_bytes, k.registers));
    }
  }
  CompiledProgram out;
  out.program = std::move(program);
  out.arch = arch;
  out.cubin = std::move(cubin.bytes);
  out.kernels = std::move(cubin.kernels);
  return out;
}

std::string serialize_program(const CompiledProgram& c) {
  const CudaProgram& p = c.program;
  json launches = json::array();
  for (const Launch& l : p.launches) {
    json args = json::array();
    for (const Slot& s : l.args) args.push_back(slot_json(s));
    json e = {{"kernel", l.kernel},
              {"grid", l.grid},
              {"block", l.block},
              {"args", args},
              {"types", l.param_types},
              {"what", bytes_to_utf8(l.what)},
              {"synchronizes", l.synchronizes}};
    if (l.gemm) {
      const GemmCall& g = *l.gemm;
      e["gemm"] = {{"batch", g.batch},
                   {"m", g.m},
                   {"n", g.n},
                   {"k", g.k},
                   {"a", layout_json(g.a)},
                   {"b", layout_json(g.b)},
                   {"operand", dtype_name(g.operand)},
                   {"result", dtype_name(g.result)},
                   {"addend", static_cast<int>(g.addend)},
                   {"activation", static_cast<int>(g.activation)},
                   {"aux", g.aux}};
    }
    launches.push_back(std::move(e));
  }
  auto copies = [](const std::vector<Copy>& list) {
    json out = json::array();
    for (const Copy& c : list) {
      out.push_back({{"from", slot_json(c.from)}, {"to", slot_json(c.to)}, {"bytes", c.bytes}});
    }
    return out;
  };
  json kernels = json::array();
  for (const KernelResources& k : c.kernels) {
    kernels.push_back({{"name", k.name},
                       {"registers", k.registers},
                       {"stack", k.stack_bytes},
                       {"spill_stores", k.spill_store_bytes},
                       {"spill_loads", k.spill_load_bytes},
                       {"shared", k.shared_bytes}});
  }
  return backend::pack_executable({{"magic", kExecutableMagic},
                                   {"format", kExecutableFormat},
                                   {"graph", bytes_to_utf8(p.graph_name)},
                                   {"arch", c.arch},
                                   {"source", bytes_to_utf8(p.source)},
                                   {"inputs", backend::types_json(p.inputs)},
                                   {"outputs", backend::types_json(p.outputs)},
                                   {"arena_bytes", p.arena_bytes},
                                   {"predicted_peak_bytes", p.predicted_peak_bytes},
                                   {"aliases", p.aliases},
                                   {"copies_before", copies(p.copies_before)},
                                   {"launches", launches},
                                   {"copies_after", copies(p.copies_after)},
                                   {"kernels", kernels}},
                                  c.cubin);
}

CompiledProgram deserialize_program(std::string_view bytes) {
  std::string_view cubin;
  const json h = backend::unpack_executable(bytes, kExecutableMagic, kRoom, cubin);
  if (backend::parse_count(h, "format", kRoom) != kExecutableFormat) {
    bad(fmt::format("the executable's format is not {}, this keel's", kExecutableFormat));
  }
  if (cubin.size() < 4 || cubin.substr(0, 4) != std::string_view("\x7f"
                                                                 "ELF",
                                                                 4)) {
    bad("the payload is not a cubin (an ELF image)");
  }
  CompiledProgram c;
  CudaProgram& p = c.program;
  p.graph_name = utf8_to_bytes(text(h, "graph", "the header"));
  c.arch = text(h, "arch", "the header");
  p.source = utf8_to_bytes(text(h, "source", "the header"));
  p.inputs = backend::parse_types(h, "inputs", kRoom);
  p.outputs = backend::parse_types(h, "outputs", kRoom);
  p.arena_bytes = backend::parse_count(h, "arena_bytes", kRoom);
  p.predicted_peak_bytes = backend::parse_count(h, "predicted_peak_bytes", kRoom);
  p.aliases = parse_aliases(h, p);
  if (!h.contains("kernels") || !h["kernels"].is_array()) bad("header field 'kernels' is missing");
  std::set<std::string> names;
  for (const json& k : h["kernels"]) {
    const std::string where = "a kernel entry";
    require_object(k, where);
    KernelResources r;
    r.name = text(k, "name", where);
    r.registers = static_cast<int>(integer(k, "registers", where, 0, 1 << 16));
    r.stack_bytes = integer(k, "stack", where);
    r.spill_store_bytes = integer(k, "spill_stores", where);
    r.spill_load_bytes = integer(k, "spill_loads", where);
    r.shared_bytes = integer(k, "shared", where);
    names.insert(r.name);
    c.kernels.push_back(std::move(r));
  }
  if (!h.contains("launches") || !h["launches"].is_array())
    bad("header field 'launches' is missing");
  for (size_t i = 0; i < h["launches"].size(); ++i) {
    const json& e = h["launches"][i];
    const std::string where = fmt::format("launch {}", i);
    require_object(e, where);
    Launch l;
    l.kernel = text(e, "kernel", where);
    const bool product = e.contains("gemm");
    l.grid = integer(e, "grid", where, product ? 0 : 1, std::numeric_limits<int32_t>::max());
    l.block = static_cast<int32_t>(integer(e, "block", where, 1, 1024));
    l.what = utf8_to_bytes(text(e, "what", where));
    l.synchronizes = e.contains("synchronizes") && e["synchronizes"].is_boolean() &&
                     e["synchronizes"].get<bool>();
    if (!e.contains("args") || !e["args"].is_array()) bad(where + " has no arguments");
    for (size_t a = 0; a < e["args"].size(); ++a) {
      l.args.push_back(parse_slot(e["args"][a], p, fmt::format("{} argument {}", where, a)));
    }
    if (!e.contains("types") || !e["types"].is_array()) bad(where + " has no parameter types");
    for (const json& t : e["types"]) {
      if (!t.is_string()) bad(where + " has a parameter type that is not a string");
      l.param_types.push_back(t.get<std::string>());
    }
    if (e.contains("gemm")) {
      const json& g = e["gemm"];
      require_object(g, where + " product");
      GemmCall call;
      call.batch = integer(g, "batch", where);
      call.m = integer(g, "m", where);
      call.n = integer(g, "n", where);
      call.k = integer(g, "k", where);
      call.a = parse_layout(g.contains("a") ? g["a"] : json(), where + " operand a");
      call.b = parse_layout(g.contains("b") ? g["b"] : json(), where + " operand b");
      const auto operand = parse_dtype(text(g, "operand", where));
      const auto result = parse_dtype(text(g, "result", where));
      call.addend = static_cast<GemmCall::Addend>(integer(g, "addend", where, 0, 2));
      call.activation = static_cast<GemmCall::Activation>(integer(g, "activation", where, 0, 2));
      if (!g.contains("aux") || !g["aux"].is_boolean()) bad(where + " product has no field 'aux'");
      call.aux = g["aux"].get<bool>();
      const size_t buffers = call.buffers();
      if (!operand || !result || l.args.size() != buffers) {
        bad(where + fmt::format(" is not a product of {} buffers", buffers));
      }
      call.operand = *operand;
      call.result = *result;
      l.gemm = call;
      if (!gemm_fits(p, l)) {
        bad(where + " is a product whose sizes and layouts disagree or reach past its buffers");
      }
    } else if (!names.count(l.kernel) || l.param_types.size() != l.args.size()) {
      bad(where + fmt::format(" launches kernel '{}', which the cubin's report does not name, or "
                              "with a bad shape",
                              l.kernel));
    }
    p.launches.push_back(std::move(l));
  }
  p.copies_before = parse_copies(h, "copies_before", p);
  p.copies_after = parse_copies(h, "copies_after", p);
  c.cubin = std::string(cubin);
  return c;
}

}  // namespace keel::cuda
