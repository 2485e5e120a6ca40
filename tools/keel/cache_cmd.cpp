// `keel cache ls | stats | verify | prune | prewarm | explain | keygen | sign`: wiring from the
// cache API to diag's reports; the formatting and choices live in diag/cache_report.h.
#include <fmt/format.h>

#include <charconv>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cache/cache.h"
#include "cache/layout.h"
#include "cache/signing.h"
#include "diag/cache_report.h"
#include "files/read.h"
#include "ir/error.h"
#include "ir/text.h"
#include "policy/recorded_policy.h"
#include "runtime/policy_config.h"
#include "runtime/program_record.h"
#include "runtime/runtime.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"

namespace keel::cli {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMaxRunRecordBytes = 64 << 20;  // a record is a few KB; its ranks' part grows

// These commands never run a program; a client that refuses to keeps it that way.
class NoProgramsClient : public backend::Client {
 public:
  std::string platform() const override { return "none"; }
  std::vector<backend::Device> devices() const override { return {}; }
  std::unique_ptr<backend::Executable> compile(const Graph&,
                                               const backend::CompileOptions&) override {
    throw Error("[keel] keel cache never compiles programs");
  }
  std::unique_ptr<backend::Executable> load(std::string_view) override {
    throw Error("[keel] keel cache never loads programs");
  }
  backend::Buffer to_device(const Array&, const backend::Device&) override {
    throw Error("[keel] keel cache never moves values to a device");
  }
  backend::MemoryStats memory_stats(const backend::Device&) const override { return {}; }
};

struct Args {
  bool json = false;
  int64_t max_bytes = -1;
  std::string key;
  std::string run;   // prewarm: a run directory or its record.json
  std::string file;  // keygen: the key file to write; sign: the key file to sign with
};

cache::ExecutableCache open_cache(const Args&, cache::Mode mode) {
  cache::CacheConfig config = runtime::cache_config_from(resolve_launch_policy());
  config.mode = mode;
  // Maintenance of a cache that is not there (a mistyped --cache-dir) would create an empty one
  // and report success.
  const std::string root = config.dir.empty() ? cache::default_cache_dir() : config.dir;
  std::error_code ec;
  if (mode == cache::Mode::readwrite && !std::filesystem::is_directory(root, ec)) {
    throw InputError(fmt::format(
        "[cache] {} is not a directory: there is no cache there to maintain; give the cache "
        "directory (--cache-dir; `keel policy show` names the one in use)",
        root));
  }
  cache::ExecutableCache c(config, std::make_shared<NoProgramsClient>());
  // Entries of a newer keel's layout are never read here: say so, on stderr (JSON stays clean).
  const std::string note =
      cache::newer_layouts_note(std::filesystem::path(c.dir()).parent_path().string());
  if (!note.empty()) fmt::print(stderr, "{}\n", note);
  return c;
}

std::vector<diag::EntrySummary> summaries(const std::vector<cache::EntryInfo>& entries) {
  std::vector<diag::EntrySummary> out;
  for (const cache::EntryInfo& e : entries) {
    const cache::Manifest& m = e.manifest;
    out.push_back({m.key, m.function, m.signature, e.bytes, m.compile_seconds, m.created_unix,
                   e.last_used_unix_ns / 1'000'000'000});
  }
  return out;
}

std::string json_text(const nlohmann::json& j) {
  return j.dump() + "\n";  // every text field was encoded by ir/utf8_escape.h
}

// Entries a listing leaves out are named on stderr (JSON output stays clean).
void note_damaged(int64_t damaged, const std::string& dir) {
  if (damaged == 0) return;
  fmt::print(stderr,
             "[cache] {} damaged {} in {} not listed; `keel cache verify` names and "
             "quarantines them\n",
             damaged, damaged == 1 ? "entry" : "entries", dir);
}

void ls(const Args& a) {
  cache::ExecutableCache c = open_cache(a, cache::Mode::readonly);
  int64_t damaged = 0;
  std::vector<cache::EntryInfo> entries = c.entries(&damaged);
  note_damaged(damaged, c.dir());
  if (!a.json) {
    fmt::print("{}", diag::format_entry_table(summaries(entries), std::time(nullptr), c.dir()));
    return;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const cache::EntryInfo& e : entries) {
    nlohmann::json j = nlohmann::json::parse(e.manifest.to_json());
    j["bytes"] = e.bytes;
    j["last_used_unix"] = e.last_used_unix_ns / 1'000'000'000;
    out.push_back(std::move(j));
  }
  fmt::print("{}", json_text(out));
}

void stats(const Args& a) {
  cache::ExecutableCache c = open_cache(a, cache::Mode::readonly);
  int64_t damaged = 0;
  diag::CacheStats s =
      diag::cache_stats(summaries(c.entries(&damaged)), diag::count_quarantined(c.dir()));
  note_damaged(damaged, c.dir());
  fmt::print("{}", a.json ? s.to_json() + "\n" : s.text(c.dir()));
}

// Inputs a signature lists ("f32[2,3], i64[]": 2): commas inside a shape do not count.
int64_t input_count(const std::string& signature) {
  int64_t n = signature.empty() ? 0 : 1;
  int depth = 0;
  for (char c : signature) {
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    n += c == ',' && depth == 0;
  }
  return n;
}

void verify(const Args& a) {
  cache::ExecutableCache c = open_cache(a, cache::Mode::readwrite);
  std::vector<cache::EntryCheck> checks = c.verify_all();
  std::vector<std::pair<std::string, std::string>> bad;
  std::vector<std::string> stray;  // their problems name the file, escaped
  size_t entries = 0;
  for (const cache::EntryCheck& e : checks) {
    if (e.stray) {
      stray.push_back(e.problem);
    } else {
      ++entries;
      if (!e.ok) bad.emplace_back(e.key, e.problem);
    }
  }
  fmt::print("{}", diag::format_verify(entries, bad, stray));
  if (!bad.empty() || !stray.empty()) throw CLI::RuntimeError("", 1);
}

void keygen(const Args& a) {
  const cache::SigningKey k = cache::SigningKey::generate(a.file);
  fmt::print(
      "wrote the secret key {} (mode 600: keep it private)\npublic key {}\n"
      "sign what this host publishes:  compile_cache.signing_key = \"{}\"\n"
      "load only what it signed:       compile_cache.signatures = \"recompile\" (or \"refuse\"), "
      "compile_cache.trusted_keys = [\"{}\"]\n",
      a.file, k.public_id(), a.file, k.public_id());
}

void sign(const Args& a) {
  const cache::SigningKey k = cache::SigningKey::read(a.file);
  cache::ExecutableCache c = open_cache(a, cache::Mode::readwrite);
  int64_t damaged = 0;
  const int64_t n = c.sign_all(a.file, &damaged);
  fmt::print("signed {} {} in {} with {}\n", n, n == 1 ? "entry" : "entries", c.dir(),
             k.public_id());
  if (damaged > 0) {
    fmt::print(stderr,
               "[cache] {} damaged {} left unsigned; `keel cache verify` names and quarantines "
               "them\n",
               damaged, damaged == 1 ? "entry" : "entries");
  }
}

void prune(const Args& a) {
  cache::ExecutableCache c = open_cache(a, cache::Mode::readwrite);
  int64_t freed = c.prune(a.max_bytes);
  diag::CacheStats s = diag::cache_stats(summaries(c.entries()), 0);
  fmt::print("freed {}; {} now holds {} in {} {}\n", diag::format_bytes(freed), c.dir(),
             diag::format_bytes(s.bytes), s.entries, s.entries == 1 ? "entry" : "entries");
}

void explain(const Args& a) {
  cache::ExecutableCache c = open_cache(a, cache::Mode::readonly);
  std::vector<cache::EntryInfo> entries = c.entries();
  std::vector<diag::EntrySummary> rows = summaries(entries);
  size_t i = diag::find_entry(rows, a.key, c.dir());
  const cache::Manifest& m = entries[i].manifest;
  fmt::print("{}", nlohmann::json::parse(m.to_json()).dump(2) + "\n");
  auto stored = [&](const cache::Manifest& e) {
    return diag::StoredProgram{e.key, c.graph_text(e.key), e.bundle_json, e.codegen};
  };
  std::optional<size_t> j = diag::nearest_other(rows, i);
  if (!j) {
    fmt::print("no other entry of '{}' in {}: {}\n", name_text(m.function), c.dir(),
               diag::explain_entry(stored(m), std::nullopt));
    return;
  }
  const cache::Manifest& other = entries[*j].manifest;
  fmt::print("nearest other entry of '{}': {} ({})\nwhat differs from it: {}\n",
             name_text(m.function), other.key, other.signature,
             diag::explain_entry(stored(m), stored(other)));
}

// This launch's policy, with the recorded run's own choices of the keys that change generated
// code where this launch left them at their defaults (a profile, KEEL_* or --set here wins).
// For --print-config (`printing`) its notes are comments and any cache mode is shown.
policy::LaunchPolicy policy_of_the_recorded_run(const std::string& run, bool printing = false) {
  policy::LaunchPolicy launch = resolve_launch_policy();
  const std::string mode = launch.string("compile_cache.mode");
  const char* note = printing ? "# " : "";
  if (mode != "readwrite" && !printing) {
    throw InputError(fmt::format(
        "[cache] prewarm stores entries, but compile_cache.mode is {}; prewarm with mode "
        "readwrite, then run with mode sealed",
        mode));
  }
  std::error_code ec;
  const std::string record =
      fs::is_regular_file(run, ec) ? run : (fs::path(run) / "record.json").string();
  if (!fs::exists(record, ec)) {
    fmt::print("{}no {}: programs are prepared with this launch's policy\n", note, record);
    return launch;
  }
  const nlohmann::json j = nlohmann::json::parse(
      files::read_file(record, kMaxRunRecordBytes, "the run record"), nullptr, false);
  if (j.is_discarded()) {
    throw InputError(fmt::format(
        "[cache] {}: not JSON (damaged or cut short); delete it to prewarm with this launch's "
        "policy, giving --set for the run's codegen keys",
        record));
  }
  if (!j.is_object() || !j.contains("policy")) {
    throw InputError(fmt::format(
        "[cache] {}: no \"policy\" object, so not a keel train run record; give a run "
        "directory (or its record.json), or delete it to prewarm with this launch's policy",
        record));
  }
  const policy::RecordedChoices choices =
      policy::adopt_recorded_codegen(launch, j["policy"].dump(), record);
  for (const std::string& taken : choices.taken) {
    fmt::print("{}as the recorded run: {}\n", note, taken);
  }
  for (const std::string& skipped : choices.not_taken) {
    fmt::print(
        "{}not taken from the record: {} (a record does not choose the compiler, its flags or "
        "the BLAS library; give --set to use it)\n",
        note, skipped);
  }
  return launch;
}

// Compiles every program a recorded run prepared, from its program records, without data and
// without running a step; a later launch with compile_cache.mode=sealed then compiles nothing.
void prewarm(const Args& a) {
  const std::vector<runtime::ProgramRecord> records = runtime::read_program_records(a.run);
  Runtime rt(policy_of_the_recorded_run(a.run));
  int64_t compiled = 0;
  for (const runtime::PrewarmResult& r : runtime::prewarm_programs(rt.jit(), records)) {
    compiled += r.tier == "compiled";
    const std::string& sig = r.record.signature;
    fmt::print("{} {} ({}) key {}{}\n",
               r.tier == "compiled" ? "compiled" : "already cached:", name_text(r.record.function),
               sig.size() <= 80 ? sig : fmt::format("{} inputs", input_count(sig)),
               r.key.substr(0, 12),
               r.tier == "compiled" ? fmt::format(" in {:.2f} s", r.seconds) : "");
    if (r.key != r.record.key) {
      fmt::print(
          "  note: the recorded run's key was {}: this launch's policy, mesh or keel build "
          "differs, so the entry serves launches like this one, not the recorded run\n",
          r.record.key.substr(0, 12));
    }
  }
  fmt::print("prewarmed {} programs into {}: {} compiled, {} already cached\n", records.size(),
             rt.jit().cache().dir(), compiled, int64_t(records.size()) - compiled);
}

}  // namespace

void add_cache(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("cache", "Inspect and maintain the executable cache");
  cmd->require_subcommand(1);
  auto a = std::make_shared<Args>();
  auto sub = [&](const char* name, const char* help, void (*run)(const Args&)) {
    CLI::App* s = cmd->add_subcommand(name, help);
    if (std::string_view(name) == "prewarm") {  // it runs with the record's codegen choices
      on_run(
          s, [a, run] { run(*a); }, [a] { return policy_of_the_recorded_run(a->run, true); });
    } else {
      on_run(s, [a, run] { run(*a); });
    }
    return s;
  };
  sub("ls", "List entries, newest first", ls)->add_flag("--json", a->json, "one JSON array");
  sub("stats", "Entries, bytes and quarantined entries, per function", stats)
      ->add_flag("--json", a->json, "one JSON object");
  sub("verify",
      "Re-check every entry (checksum, bundle, files; signatures when compile_cache.signatures "
      "requires them); quarantine damaged ones; exit 1 if any entry is bad",
      verify);
  sub("keygen", "Write a new Ed25519 secret key for signing entries and print its public key",
      keygen)
      ->add_option("--out", a->file, "the secret key file to create (never overwritten)")
      ->required();
  sub("sign", "Sign every intact entry with a secret key (entries published before signing was on)",
      sign)
      ->add_option("--key", a->file, "the secret key file (keel cache keygen)")
      ->required();
  sub("prune", "Evict least recently used entries until the cache fits", prune)
      ->add_option("--max-bytes", a->max_bytes, "size to fit in, in bytes")
      ->required()
      ->check(CLI::Validator(
          [](std::string& text) {
            int64_t bytes = -1;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bytes);
            return ec == std::errc() && end == text.data() + text.size() && bytes >= 0
                       ? std::string()
                       : text +
                             " is not a number of bytes; give an integer >= 0 (1 GiB is "
                             "1073741824)";
          },
          "BYTES"));
  sub("prewarm",
      "Compile every program a recorded run prepared (RUN_DIR/programs), without data or a step, "
      "so a launch with compile_cache.mode=sealed compiles nothing; codegen keys the run set "
      "(opt_level, matmul_precision, disable_passes) are taken from its record.json unless this "
      "launch sets them",
      prewarm)
      ->add_option("RUN", a->run, "a keel train run directory, or its record.json")
      ->required();
  sub("explain", "Show an entry's manifest and why it differs from its nearest sibling", explain)
      ->add_option("KEY", a->key, "the entry's key or a unique prefix of it")
      ->required();
}

}  // namespace keel::cli
