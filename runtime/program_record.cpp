#include "runtime/program_record.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "files/publish.h"
#include "files/read.h"
#include "ir/error.h"
#include "ir/text.h"
#include "ir/utf8_escape.h"

namespace keel::runtime {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kMaxRecordBytes = int64_t{1} << 30;

std::string programs_dir(const std::string& run_dir_or_record) {
  std::error_code ec;  // a path too long to stat is then refused as "no programs/ directory"
  if (fs::is_regular_file(run_dir_or_record, ec)) {
    return (fs::path(run_dir_or_record).parent_path() / "programs").string();
  }
  return run_dir_or_record + "/programs";
}

ProgramRecord parse_record(const std::string& file) {
  const std::string text = files::read_file(file, kMaxRecordBytes, "the program record");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format("[cache] {}: {}; delete it or record the run again", file, what));
  };
  if (j.is_discarded() || !j.is_object()) throw bad("not a JSON object (damaged or cut short)");
  ProgramRecord r;
  r.source = file;
  for (auto [field, out] : {std::pair{"function", &r.function},
                            {"key", &r.key},
                            {"signature", &r.signature},
                            {"mesh", &r.mesh},
                            {"graph", &r.graph}}) {
    if (!j.contains(field) || !j[field].is_string()) {
      throw bad(fmt::format("field \"{}\" is missing or not a string", field));
    }
    *out = j[field].get<std::string>();
  }
  r.function = utf8_to_bytes(r.function);  // written by bytes_to_utf8: any bytes round-trip
  r.graph = utf8_to_bytes(r.graph);
  return r;
}

}  // namespace

void write_program_record(const std::string& run_dir, const ProgramRecord& r) {
  nlohmann::ordered_json collectives = nlohmann::ordered_json::object();
  for (const auto& [op, t] : r.collectives) {
    collectives[op] = {{"calls", t.calls}, {"bytes", t.bytes}};
  }
  const nlohmann::ordered_json j = {{"function", bytes_to_utf8(r.function)},
                                    {"key", r.key},
                                    {"signature", r.signature},
                                    {"mesh", r.mesh},
                                    {"collectives", collectives},
                                    {"graph", bytes_to_utf8(r.graph)}};
  const std::string dir = run_dir + "/programs";
  fs::create_directories(dir);
  files::publish_file(dir + "/" + r.key + ".json", j.dump(1) + "\n");
}

std::vector<ProgramRecord> read_program_records(const std::string& run_dir_or_record) {
  const std::string dir = programs_dir(run_dir_or_record);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InputError(fmt::format(
        "[cache] {} has no programs/ directory: give the run directory (or record.json) of a "
        "keel train run; runs record the programs they prepare there",
        run_dir_or_record));
  }
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json" && e.path().filename().string()[0] != '.') {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw InputError(fmt::format("[cache] {} holds no program records; nothing to prewarm", dir));
  }
  std::vector<ProgramRecord> out;
  for (const std::string& f : files) out.push_back(parse_record(f));
  return out;
}

std::vector<PrewarmResult> prewarm_programs(CachedJit& jit,
                                            const std::vector<ProgramRecord>& records) {
  std::vector<PrewarmResult> out;
  for (const ProgramRecord& r : records) {
    const Graph graph = parse_graph(r.graph, r.source);
    jit.set_mesh(r.mesh);
    const cache::Lookup found = jit.prewarm(graph);
    out.push_back({r, found.key, std::string(cache::tier_name(found.tier)), found.seconds});
  }
  return out;
}

}  // namespace keel::runtime
