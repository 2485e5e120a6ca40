// lower: the pass list, run in order, each one switchable, logged and optionally dumped.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "files/publish.h"
#include "ir/error.h"
#include "ir/scan.h"
#include "ir/text.h"
#include "ir/verify.h"
#include "passes/pipeline.h"
#include "passes/rebuild.h"

namespace keel::passes {
namespace {

std::string known_names() {
  std::string s;
  for (const std::string& n : pass_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string human_bytes(int64_t n) {
  if (n < 1000) return fmt::format("{} B", n);
  const char* units[] = {"KB", "MB", "GB", "TB"};
  double v = static_cast<double>(n) / 1000.0;
  size_t u = 0;
  while (v >= 1000.0 && u + 1 < std::size(units)) {
    v /= 1000.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

// Graph names become file names: anything but [A-Za-z0-9._-] turns into '_'.
std::string file_stem(const std::string& name) {
  std::string s = name.empty() ? "graph" : name;
  for (char& c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return s;
}

// Published (temporary, fsync, rename), so a reader never sees a torn dump.
void write_dump(const PassOptions& o, const Graph& g, size_t n, const std::string& pass,
                const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(o.dump_dir, ec);
  if (ec) {
    throw Error(
        fmt::format("[passes] cannot create dump_dir '{}': {}; set it to a writable "
                    "directory",
                    o.dump_dir, ec.message()));
  }
  files::publish_file(fmt::format("{}/{}.{}.{}.txt", o.dump_dir, file_stem(g.name()), n, pass),
                      text);
}

void verify_after(const Graph& g, const std::string& pass) {
  std::vector<std::string> problems = verify_problems(g);
  if (!problems.empty()) {
    throw Error(
        fmt::format("[passes] {} produced an invalid graph: {}; disable the pass "
                    "(passes.disable) and report the graph",
                    pass, problems.front()));
  }
}

}  // namespace

const std::vector<std::string>& pass_names() {
  static const std::vector<std::string> names = {
      "canonicalize",          "bf16_operands",     "cse",         "dce",
      "recompute_elementwise", "place_collectives", "fold_layout", "fuse",
      "concat_in_place",       "plan_memory"};
  return names;
}

std::string PassOptions::fingerprint() const {
  std::string s = "passes.disabled=";
  bool first = true;
  for (const std::string& d : disabled) {  // std::set: sorted, so canonical
    s += (first ? "" : ",") + d;
    first = false;
  }
  return s;
}

namespace {

// The graph-to-graph passes in order; `n` counts them for the dump names.
Graph graph_passes(const Graph& graph, const PassOptions& options, std::vector<std::string>& log,
                   size_t& n) {
  const auto on = [&](const std::string& p) { return options.disabled.count(p) == 0; };
  const bool dump = !options.dump_dir.empty();
  using GraphPass = Graph (*)(const Graph&);
  const std::pair<const char*, GraphPass> passes[] = {
      {"canonicalize", canonicalize},
      {"bf16_operands", bf16_operands},
      {"cse", cse},
      {"dce", dce},
      {"recompute_elementwise", recompute_elementwise},
      {"place_collectives", place_collectives}};
  Graph g = graph;
  for (const auto& [name, pass] : passes) {
    ++n;
    if (!on(name)) {
      log.push_back(fmt::format("{}: skipped", name));
      continue;
    }
    if (pass == bf16_operands && !options.bf16_matmul) {
      log.push_back(fmt::format("{}: not run (f32 matmuls)", name));
      continue;
    }
    const size_t before = g.size();
    g = pass(g);
    verify_after(g, name);
    log.push_back(fmt::format("{}: {} -> {} nodes", name, before, g.size()));
    if (dump) write_dump(options, g, n, name, print_graph(g));
  }
  return g;
}

}  // namespace

Graph rewritten(const Graph& graph, const PassOptions& options) {
  PassOptions quiet = options;
  quiet.dump_dir.clear();
  std::vector<std::string> log;
  size_t n = 0;
  const Graph g = graph_passes(graph, quiet, log, n);
  Rebuilder rb(g);
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& node = g.nodes()[i];
    if (node.op != Op::scan) {
      rb.copy(static_cast<NodeId>(i));
      continue;
    }
    Attrs a = node.attrs;
    a.set("body", std::make_shared<const Graph>(rewritten(node.attrs.graph("body"), options)));
    const int64_t count = scan_info(node.attrs, node.inputs.size()).results();
    const std::vector<NodeId> results = emit_scan(
        rb.dst_mut(), rb.mapped_inputs(static_cast<NodeId>(i)), std::move(a), node.loc, "passes");
    for (int64_t k = 0; k < count; ++k) {
      rb.map_to(static_cast<NodeId>(i + 1 + static_cast<size_t>(k)),
                results.at(static_cast<size_t>(k)));
    }
    i += static_cast<size_t>(count);
  }
  return rb.finish();
}

Lowered lower(const Graph& graph, const PassOptions& options) {
  for (const std::string& d : options.disabled) {
    const auto& names = pass_names();
    if (std::find(names.begin(), names.end(), d) == names.end()) {
      throw Error(fmt::format("[passes] unknown pass '{}'; known: {}", d, known_names()));
    }
  }
  const int64_t align = options.target.alignment;
  if (align <= 0 || (align & (align - 1)) != 0) {
    throw Error(fmt::format(
        "[passes] target '{}' aligns buffers to {} bytes; the alignment must be a power of two",
        options.target.name, align));
  }
  if (std::vector<std::string> problems = verify_problems(graph); !problems.empty()) {
    throw Error(
        fmt::format("[passes] graph '{}' does not verify: {}; fix the program before "
                    "lowering it",
                    graph.name(), problems.front()));
  }
  const auto on = [&](const std::string& p) { return options.disabled.count(p) == 0; };
  const bool dump = !options.dump_dir.empty();
  Lowered out{graph, {}, {}, {}, options, {}};
  size_t n = 0;
  out.graph = graph_passes(graph, options, out.log, n);
  out.bodies = lower_scan_bodies(out.graph, options);
  std::vector<View> views = fold_layout(out.graph, on("fold_layout"), options.target);
  if (on("fold_layout")) {
    const size_t folded = static_cast<size_t>(
        std::count_if(views.begin(), views.end(), [](const View& v) { return v.base >= 0; }));
    out.log.push_back(fmt::format("fold_layout: {} layout ops read in place", folded));
  } else {
    out.log.push_back("fold_layout: skipped");
  }
  if (dump) write_dump(options, out.graph, ++n, "fold_layout", print_views(views));
  out.fusion = fuse(out.graph, on("fuse"), std::move(views), options.target);
  out.log.push_back(on("fuse") ? fmt::format("fuse: {} nodes -> {} groups", out.graph.size(),
                                             out.fusion.groups.size())
                               : std::string("fuse: skipped"));
  if (dump) write_dump(options, out.graph, ++n, "fuse", print_fusion(out.fusion));
  if (on("concat_in_place") && out.fusion.views.empty()) {
    out.log.push_back("concat_in_place: skipped (no views without fold_layout)");
  } else if (on("concat_in_place")) {
    const int placed = concat_in_place(out.graph, out.fusion, options.target);
    out.log.push_back(fmt::format("concat_in_place: {} concats written in place", placed));
  } else {
    out.log.push_back("concat_in_place: skipped");
  }
  if (dump) write_dump(options, out.graph, ++n, "concat_in_place", print_views(out.fusion.views));
  out.memory = plan_memory(out.graph, out.fusion, on("plan_memory"), out.bodies, options.target);
  out.log.push_back(on("plan_memory") ? fmt::format("plan_memory: arena {}, predicted peak {}",
                                                    human_bytes(out.memory.arena_bytes),
                                                    human_bytes(out.memory.predicted_peak_bytes))
                                      : std::string("plan_memory: skipped"));
  if (dump)
    write_dump(options, out.graph, ++n, "plan_memory",
               print_memory(out.graph, out.memory, out.bodies));
  return out;
}

}  // namespace keel::passes
