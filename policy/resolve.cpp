#include "policy/resolve.h"

#include <fmt/format.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <filesystem>
#include <set>

#include "files/read.h"
#include "ir/error.h"

extern char** environ;

#ifndef KEEL_PROFILES_DIR
#define KEEL_PROFILES_DIR "profiles"
#endif

namespace keel::policy {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kMaxProfileBytes = 4 << 20;  // a profile is a few dozen lines

// Variables keel once read directly; a user still setting one gets the new name, not silence.
// "KEEL_CPU_OPT_LEVEL" for "cpu.opt_level".
std::string env_name_of(const std::string& dotted) {
  std::string out = "KEEL_" + dotted;
  for (char& c : out)
    c = c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

const std::map<std::string, std::string>& retired_variables() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> out = {
        {"KEEL_CACHE_DIR", "KEEL_COMPILE_CACHE_DIR"},
        {"KEEL_FORBID_COMPILE", "KEEL_COMPILE_CACHE_FORBID_COMPILE"},
        {"KEEL_DISABLE_PASSES", "KEEL_PASSES_DISABLE"},
        {"KEEL_DUMP_PASSES", "KEEL_PASSES_DUMP and KEEL_DIAG_DUMP_DIR"},
    };
    for (const auto& [before, now] : renamed_keys()) {
      out[env_name_of(before)] = fmt::format("{} ({} is now {}{})", env_name_of(now), before, now,
                                             renamed_value_note(before));
    }
    return out;
  }();
  return m;
}

// One line for a renamed key: "cpu.opt_level is now cpu.opt_level"; nullopt otherwise.
std::optional<std::string> renamed(const std::string& dotted) {
  const auto it = renamed_keys().find(dotted);
  if (it == renamed_keys().end()) return std::nullopt;
  return fmt::format("{} is now {}{}", dotted, it->second, renamed_value_note(dotted));
}

std::string where(const std::string& path, const toml::source_region& r) {
  return fmt::format("{}:{}", path, r.begin.line);
}

std::string node_kind(const toml::node& n) {
  if (n.is_boolean()) return "a boolean";
  if (n.is_integer()) return "an integer";
  if (n.is_floating_point()) return "a float";
  if (n.is_string()) return "a string";
  if (n.is_array()) return "an array";
  if (n.is_table()) return "a table";
  return "a date/time";
}

// The node as a value of the key's kind, or InputError naming file:line.
Value to_value(const KeySpec& spec, const toml::node& n, const std::string& at) {
  auto wrong = [&](const std::string& got) {
    return InputError(fmt::format("[policy] {}: {} must be {}, got {}", at, spec.name(),
                                  spec.allowed_text(), got));
  };
  switch (spec.kind) {
    case Kind::boolean:
      if (auto v = n.value<bool>(); v && n.is_boolean()) return Value(*v);
      break;
    case Kind::integer:
      if (n.is_integer()) return Value(*n.value<int64_t>());
      break;
    case Kind::string:
      if (n.is_string()) return Value(*n.value<std::string>());
      break;
    case Kind::string_list:
    case Kind::integer_list: {
      const toml::array* a = n.as_array();
      if (!a) break;
      std::vector<std::string> strings;
      std::vector<int64_t> ints;
      for (const toml::node& e : *a) {
        bool ok = spec.kind == Kind::string_list ? e.is_string() : e.is_integer();
        if (!ok) throw wrong(fmt::format("an array holding {}", node_kind(e)));
        if (e.is_string()) strings.push_back(*e.value<std::string>());
        if (e.is_integer()) ints.push_back(*e.value<int64_t>());
      }
      if (spec.kind == Kind::string_list) return Value(strings);
      return Value(ints);
    }
  }
  throw wrong(node_kind(n));
}

// The text of --set or an environment variable as a value of the key's kind: a list is
// comma-separated, or a TOML array as a profile spells it (["-O2", "-g"]).
std::optional<Value> parse_setting_text(const KeySpec& spec, const std::string& text,
                                        const std::string& at) {
  const bool list = spec.kind == Kind::string_list || spec.kind == Kind::integer_list;
  if (!list || !text.starts_with('[')) return parse_value_text(spec, text);
  toml::table table;
  try {
    table = toml::parse("value = " + text);
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
  const toml::node* value = table.get("value");
  if (table.size() != 1 || !value) return std::nullopt;
  return to_value(spec, *value, at);
}

class Loader {
 public:
  Loader(LaunchPolicy& policy, std::vector<std::string> dirs)
      : policy_(policy), dirs_(std::move(dirs)) {}

  void load(const std::string& path, const std::string& from) {
    std::error_code ec;
    std::string canonical = fs::weakly_canonical(path, ec).string();
    if (!active_.insert(canonical).second) {
      throw InputError(
          fmt::format("[policy] {}: profile '{}' extends itself (a cycle)", from, path));
    }
    toml::table table;
    try {
      table = toml::parse(files::read_file(path, kMaxProfileBytes, "the profile"), path);
    } catch (const toml::parse_error& e) {
      throw InputError(fmt::format("[policy] {}: not valid TOML: {}", where(path, e.source()),
                                   std::string(e.description())));
    }
    if (const toml::node* base = table.get("extends")) {
      std::string at = where(path, base->source());
      if (!base->is_string()) {
        throw InputError(fmt::format("[policy] {}: extends must be a profile name or path", at));
      }
      std::string name = *base->value<std::string>();
      if (name != "none") load(find_relative(name, path, at), at);
    }
    for (const auto& [group, node] : table) {
      std::string at = where(path, group.source());
      if (group.str() == "extends" || group.str() == "description") continue;
      const toml::table* keys = node.as_table();
      auto& groups = policy_groups();
      if (std::find(groups.begin(), groups.end(), std::string(group.str())) == groups.end()) {
        refuse_renamed(path, std::string(group.str()), node.as_table());
        throw InputError(fmt::format("[policy] {}: unknown group [{}]; groups: {}", at, group.str(),
                                     fmt::join(groups, ", ")));
      }
      if (!keys) {
        throw InputError(fmt::format("[policy] {}: {} must be a table ([{}] followed by keys)", at,
                                     group.str(), group.str()));
      }
      for (const auto& [name, value] : *keys) load_key(path, std::string(group.str()), name, value);
    }
    active_.erase(canonical);
  }

 private:
  // A group that no longer exists but whose keys moved: the first of them, named with its new
  // name and where to write it.
  static void refuse_renamed(const std::string& path, const std::string& group,
                             const toml::table* keys) {
    if (!keys) return;
    for (const auto& [name, value] : *keys)
      refuse_renamed(path, group, std::string(name.str()), name);
  }
  static void refuse_renamed(const std::string& path, const std::string& group,
                             const std::string& key, const toml::key& name) {
    const std::string dotted = group + "." + key;
    if (std::optional<std::string> why = renamed(dotted)) {
      const std::string now = renamed_keys().at(dotted);
      throw InputError(fmt::format("[policy] {}: {}; write {} under [{}]",
                                   where(path, name.source()), *why, now.substr(now.find('.') + 1),
                                   now.substr(0, now.find('.'))));
    }
  }

  void load_key(const std::string& path, const std::string& group, const toml::key& name,
                const toml::node& value) {
    std::string at = where(path, name.source());
    const KeySpec* spec = find_key(group, std::string(name.str()));
    refuse_renamed(path, group, std::string(name.str()), name);
    if (!spec) {
      std::vector<std::string> keys;
      for (const KeySpec& k : policy_schema()) {
        if (k.group == group && k.from_file) keys.push_back(k.key);
      }
      throw InputError(fmt::format("[policy] {}: unknown key '{}.{}'; keys in [{}]: {}", at, group,
                                   name.str(), group, fmt::join(keys, ", ")));
    }
    if (!spec->from_file) {
      throw InputError(fmt::format(
          "[policy] {}: {} is chosen at launch (--profile or {}), not in a profile file", at,
          spec->name(), spec->env_name()));
    }
    policy_.set(spec->name(), to_value(*spec, value, at),
                {Origin::Source::file, fmt::format("{}:{}", path, name.source().begin.line)});
  }

  std::string find_relative(const std::string& name, const std::string& from_file,
                            const std::string& at) {
    fs::path sibling = fs::path(from_file).parent_path() / name;
    std::error_code ec;  // a name too long to stat is simply not a file here
    if (fs::is_regular_file(sibling, ec)) return sibling.string();
    if (fs::is_regular_file(sibling.string() + ".toml", ec)) return sibling.string() + ".toml";
    try {
      return find_profile(name, dirs_);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{} (extended at {})", e.what(), at));
    }
  }

  LaunchPolicy& policy_;
  std::vector<std::string> dirs_;
  std::set<std::string> active_;
};

// Every key's variable name and every group's prefix, built once: the whole process environment
// is matched against them at each launch (and each fuzz input).
struct EnvIndex {
  std::map<std::string, const KeySpec*> by_name;
  std::vector<std::pair<std::string, std::string>> group_prefixes;  // (prefix, group)
};

const EnvIndex& env_index() {
  static const EnvIndex index = [] {
    EnvIndex out;
    for (const KeySpec& k : policy_schema()) out.by_name.emplace(k.env_name(), &k);
    for (const std::string& g : policy_groups()) {
      out.group_prefixes.emplace_back(group_env_prefix(g), g);
    }
    return out;
  }();
  return index;
}

void apply_environment(LaunchPolicy& policy, const std::map<std::string, std::string>& env) {
  for (const auto& [name, text] : env) {
    if (auto retired = retired_variables().find(name); retired != retired_variables().end()) {
      throw InputError(
          fmt::format("[policy] env {}: no longer read; use {}", name, retired->second));
    }
    const EnvIndex& index = env_index();
    const auto named = index.by_name.find(name);
    const KeySpec* spec = named == index.by_name.end() ? nullptr : named->second;
    std::string group;
    for (const auto& [prefix, g] : index.group_prefixes) {
      if (name.rfind(prefix, 0) == 0) group = g;
    }
    if (!spec && group.empty() && name.starts_with("KEEL_CODEGEN_")) {
      throw InputError(fmt::format(
          "[policy] env {}: no longer read; the [codegen] group is now [cpu] (compiler, flags, "
          "opt_level, blas, matmul_precision, compile_timeout_s) and [passes] (disable, dump)",
          name));
    }
    if (!spec && group.empty()) continue;  // not a policy variable
    if (!spec) {
      std::vector<std::string> names;
      for (const KeySpec& k : policy_schema()) {
        if (k.group == group) names.push_back(k.env_name());
      }
      throw InputError(fmt::format("[policy] env {}: no such setting in [{}]; variables: {}", name,
                                   group, fmt::join(names, ", ")));
    }
    if (spec->name() == "launch.profile") continue;  // selects the file, handled by resolve
    std::optional<Value> v = parse_setting_text(*spec, text, "env " + name);
    if (!v) {
      throw InputError(fmt::format("[policy] env {}: {} must be {}, got \"{}\"", name, spec->name(),
                                   spec->allowed_text(), text));
    }
    policy.set(spec->name(), *v, {Origin::Source::environment, name});
  }
}

void apply_set(LaunchPolicy& policy, const std::string& assignment) {
  size_t eq = assignment.find('=');
  std::string dotted = assignment.substr(0, eq);
  if (eq == std::string::npos) {
    throw InputError(fmt::format("[policy] --set {}: expected group.key=value", assignment));
  }
  const KeySpec* spec = find_key(dotted);
  if (std::optional<std::string> why = renamed(dotted)) {
    throw InputError(fmt::format("[policy] --set {}: {}", assignment, *why));
  }
  if (!spec) {
    throw InputError(fmt::format("[policy] --set {}: unknown key '{}'; see 'keel policy keys'",
                                 assignment, dotted));
  }
  if (!spec->from_file) {
    throw InputError(
        fmt::format("[policy] --set {}: choose the profile with --profile", assignment));
  }
  std::string text = assignment.substr(eq + 1);
  std::optional<Value> v = parse_setting_text(*spec, text, "--set " + assignment);
  if (!v) {
    throw InputError(fmt::format("[policy] --set {}: {} must be {}, got \"{}\"", assignment, dotted,
                                 spec->allowed_text(), text));
  }
  policy.set(dotted, *v, {Origin::Source::command_line, "--set " + assignment});
}

// Rules that tie keys together, checked on the final policy.
void check_consistency(const LaunchPolicy& p) {
  const Setting& axes = p.setting("spmd.mesh_axes");
  const Setting& shape = p.setting("spmd.mesh_shape");
  const auto& names = std::get<std::vector<std::string>>(axes.value);
  const auto& sizes = std::get<std::vector<int64_t>>(shape.value);
  if (names.size() != sizes.size() || names.empty()) {
    throw InputError(fmt::format(
        "[policy] {}: spmd.mesh_axes has {} names but spmd.mesh_shape ({}) has {} sizes; give "
        "one size per axis",
        axes.origin.text(), names.size(), shape.origin.text(), sizes.size()));
  }
  std::set<std::string> seen;
  for (const std::string& n : names) {
    if (n.empty() || !seen.insert(n).second) {
      throw InputError(fmt::format("[policy] {}: spmd.mesh_axes must be distinct, non-empty names",
                                   axes.origin.text()));
    }
  }
  const Setting& request = p.setting("features.request");
  for (const std::string& f : std::get<std::vector<std::string>>(request.value)) {
    if (f == "scan_layers") {
      throw InputError(fmt::format(
          "[policy] {}: features.request = scan_layers is now launch.layer_layout = scanned",
          request.origin.text()));
    }
  }
  const Setting& rules = p.setting("sharding.rules");
  std::set<std::string> ruled;
  for (const std::string& rule : std::get<std::vector<std::string>>(rules.value)) {
    const size_t eq = rule.find('=');
    const std::string dimension = rule.substr(0, std::min(eq, rule.size()));
    static const std::set<std::string> kDimensions = {"embed",  "experts", "heads", "head_dim",
                                                      "memory", "mlp",     "vocab"};
    if (eq == std::string::npos || eq + 1 == rule.size() || !kDimensions.count(dimension)) {
      throw InputError(fmt::format(
          "[policy] {}: sharding.rules entry '{}' is not dimension=axis with a dimension of "
          "embed, experts, heads, head_dim, memory, mlp or vocab (e.g. heads=model)",
          rules.origin.text(), rule));
    }
    const std::string axis = rule.substr(eq + 1);
    const std::vector<std::string>& axes = p.strings("spmd.mesh_axes");
    if (axis != "model" && std::find(axes.begin(), axes.end(), axis) == axes.end()) {
      throw InputError(fmt::format(
          "[policy] {}: sharding.rules {}: '{}' is not a mesh axis (spmd.mesh_axes: {}); name "
          "one of them, or model",
          rules.origin.text(), rule, axis, fmt::join(axes, ", ")));
    }
    if (!ruled.insert(dimension).second) {
      throw InputError(fmt::format("[policy] {}: sharding.rules maps {} twice; keep one rule",
                                   rules.origin.text(), dimension));
    }
  }
  const Setting& dump = p.setting("passes.dump");
  if (std::get<bool>(dump.value) && p.string("diag.dump_dir").empty()) {
    throw InputError(
        fmt::format("[policy] {}: passes.dump = true needs diag.dump_dir", dump.origin.text()));
  }
}

}  // namespace

std::map<std::string, std::string> keel_environment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string entry = *e;
    size_t eq = entry.find('=');
    if (entry.rfind("KEEL_", 0) == 0 && eq != std::string::npos) {
      out[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
  }
  return out;
}

std::vector<std::string> default_profile_dirs() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("KEEL_PROFILE_PATH")) {
    std::string list = path;
    size_t start = 0;
    while (start <= list.size()) {
      size_t colon = list.find(':', start);
      std::string d = list.substr(start, colon == std::string::npos ? colon : colon - start);
      if (!d.empty()) dirs.push_back(d);
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  // An installed keel finds its profiles beside its binary, or under the prefix it was built
  // for; a build tree uses the source tree's.
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::string> candidates;
  if (!ec) candidates.push_back((exe.parent_path().parent_path() / "share/keel/profiles").string());
  candidates.push_back(KEEL_INSTALLED_PROFILES_DIR);
  candidates.push_back(KEEL_PROFILES_DIR);
  size_t before = dirs.size();
  for (const std::string& d : candidates) {
    if (std::filesystem::is_directory(d, ec) &&
        std::find(dirs.begin(), dirs.end(), d) == dirs.end()) {
      dirs.push_back(d);
    }
  }
  if (dirs.size() == before) dirs.push_back(KEEL_PROFILES_DIR);  // named in the error
  return dirs;
}

std::string find_profile(const std::string& name, const std::vector<std::string>& dirs) {
  bool is_path = name.find('/') != std::string::npos || name.ends_with(".toml");
  if (is_path) {
    std::error_code ec;
    if (fs::exists(name, ec)) return name;  // not a regular file: the reader names what it is
    throw InputError(fmt::format("[policy] --profile {}: no such file", name));
  }
  for (const std::string& d : dirs) {
    fs::path p = fs::path(d) / (name + ".toml");
    std::error_code ec;  // a name too long to stat is no profile
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  throw InputError(fmt::format("[policy] --profile {}: no profile of that name; profiles: {}", name,
                               fmt::join(list_profiles(dirs), ", ")));
}

std::vector<std::string> list_profiles(const std::vector<std::string>& dirs) {
  std::set<std::string> names = {"none"};
  for (const std::string& d : dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (e.path().extension() == ".toml") names.insert(e.path().stem().string());
    }
  }
  return {names.begin(), names.end()};
}

LaunchPolicy resolve_policy(const PolicySources& sources) {
  std::vector<std::string> dirs =
      sources.profile_dirs.empty() ? default_profile_dirs() : sources.profile_dirs;
  LaunchPolicy policy;
  std::string profile = sources.profile;
  Origin profile_origin{Origin::Source::command_line, "--profile"};
  if (profile.empty()) {
    auto env = sources.environment.find("KEEL_LAUNCH_PROFILE");
    if (env != sources.environment.end() && !env->second.empty()) {
      profile = env->second;
      profile_origin = {Origin::Source::environment, "KEEL_LAUNCH_PROFILE"};
    }
  }
  if (!profile.empty() && profile != "none") {
    Loader(policy, dirs).load(find_profile(profile, dirs), profile_origin.text());
    policy.set("launch.profile", profile, profile_origin);
  }
  apply_environment(policy, sources.environment);
  for (const std::string& s : sources.sets) apply_set(policy, s);
  check_consistency(policy);
  return policy;
}

LaunchPolicy check_profile_file(const std::string& path, const std::vector<std::string>& dirs) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(fmt::format("[policy] {}: no such file", path));
  LaunchPolicy policy;
  Loader(policy, dirs).load(path, path);
  check_consistency(policy);
  return policy;
}

}  // namespace keel::policy
