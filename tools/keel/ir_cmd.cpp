#include <fmt/format.h>

#include <memory>

#include "ir/hash.h"
#include "ir/text.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"
#include "train/files.h"

namespace keel::cli {

void add_ir(CLI::App& app) {
  CLI::App* ir = app.add_subcommand("ir", "Read programs in keel's canonical text form");
  ir->require_subcommand(1);
  auto file = std::make_shared<std::string>();

  CLI::App* check = ir->add_subcommand("check", "Parse and verify a program; print its key");
  check->add_option("FILE", *file, "program text (.kir)")->required();
  on_run(check, [file] {
    Graph g = parse_graph(train::read_file(*file), *file);
    fmt::print("{}: ok, graph {}, {} nodes, {} inputs, {} outputs, key {}\n", *file, g.name(),
               g.size(), g.params().size(), g.outputs().size(), graph_hash(g).hex());
  });

  CLI::App* print = ir->add_subcommand("print", "Print a program in canonical form");
  print->add_option("FILE", *file, "program text (.kir)")->required();
  auto no_loc = std::make_shared<bool>(false);
  print->add_flag("--no-locations", *no_loc, "omit source locations");
  on_run(print, [file, no_loc] {
    fmt::print("{}", print_graph(parse_graph(train::read_file(*file), *file), !*no_loc));
  });
}

}  // namespace keel::cli
