#include <fmt/format.h>

#include <memory>

#include "files/read.h"
#include "ir/hash.h"
#include "ir/text.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"

namespace keel::cli {
namespace {

constexpr int64_t kMaxProgramBytes = int64_t{1} << 30;  // a gpt2-m step is a few MB of text

Graph read_program(const std::string& file) {
  return parse_graph(files::read_file(file, kMaxProgramBytes, "the program text"), file);
}

}  // namespace

void add_ir(CLI::App& app) {
  CLI::App* ir = app.add_subcommand("ir", "Read programs in keel's canonical text form");
  ir->require_subcommand(1);
  auto file = std::make_shared<std::string>();

  CLI::App* check = ir->add_subcommand("check", "Parse and verify a program; print its graph hash");
  check->add_option("FILE", *file, "program text (.kir)")->required();
  on_run(check, [file] {
    Graph g = read_program(*file);
    fmt::print("{}: ok, graph {}, {} nodes, {} inputs, {} outputs, graph hash {}\n", *file,
               g.name(), g.size(), g.params().size(), g.outputs().size(), graph_hash(g).hex());
  });

  CLI::App* print = ir->add_subcommand("print", "Print a program in canonical form");
  print->add_option("FILE", *file, "program text (.kir)")->required();
  auto no_loc = std::make_shared<bool>(false);
  print->add_flag("--no-locations", *no_loc, "omit source locations");
  on_run(print, [file, no_loc] { fmt::print("{}", print_graph(read_program(*file), !*no_loc)); });
}

}  // namespace keel::cli
