#include "policy/schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include "ir/error.h"
#include "ir/text.h"
#include "policy/features.h"
#include "policy/layer_layout.h"

namespace keel::policy {

std::string kind_name(Kind k) {
  switch (k) {
    case Kind::boolean:
      return "a boolean";
    case Kind::integer:
      return "an integer";
    case Kind::string:
      return "a string";
    case Kind::string_list:
      return "an array of strings";
    case Kind::integer_list:
      return "an array of integers";
  }
  return "?";
}

namespace {

// A TOML basic string: quotes, backslashes and control characters escaped, so a value prints
// on one line and (valid UTF-8, as TOML requires) reads back as itself.
std::string toml_string(const std::string& s) {
  return quoted_text(s, /*unicode_escapes=*/true);
}

}  // namespace

std::string value_text(const Value& v) {
  struct Print {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(const std::string& s) const { return toml_string(s); }
    std::string operator()(const std::vector<std::string>& l) const {
      std::string out;
      for (const auto& s : l) out += (out.empty() ? "" : ", ") + toml_string(s);
      return "[" + out + "]";
    }
    std::string operator()(const std::vector<int64_t>& l) const {
      return fmt::format("[{}]", fmt::join(l, ", "));
    }
  };
  return std::visit(Print{}, v);
}

std::string group_env_prefix(const std::string& group) {
  std::string out = "KEEL_" + group + "_";
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string KeySpec::env_name() const {
  std::string out = group_env_prefix(group) + key;
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string KeySpec::allowed_text() const {
  std::string range;
  if (kind == Kind::integer || kind == Kind::integer_list) {
    range = max == INT64_MAX ? fmt::format(" >= {}", min) : fmt::format(" in {}..{}", min, max);
  }
  std::string choices;
  if (!allowed.empty()) choices = fmt::format(" (each one of {})", fmt::join(allowed, ", "));
  if (!form.empty()) choices = fmt::format(" (each {})", form);
  if (kind == Kind::string && !allowed.empty()) {
    return fmt::format("one of {}", fmt::join(allowed, ", "));
  }
  if (kind == Kind::string && !form.empty()) return form;
  if (kind == Kind::integer_list) return fmt::format("an array of integers{}", range);
  return kind_name(kind) + range + choices;
}

KeySpec make_key(std::string group, std::string name, Kind kind, Value fallback, std::string doc) {
  KeySpec s;
  s.group = std::move(group);
  s.key = std::move(name);
  s.kind = kind;
  s.fallback = std::move(fallback);
  s.doc = std::move(doc);
  return s;
}

KeySpec make_integer(std::string group, std::string name, int64_t fallback, int64_t min,
                     int64_t max, std::string doc) {
  KeySpec s = make_key(std::move(group), std::move(name), Kind::integer, fallback, std::move(doc));
  s.min = min;
  s.max = max;
  return s;
}

KeySpec make_choice(std::string group, std::string name, std::string fallback,
                    std::vector<std::string> allowed, std::string doc) {
  KeySpec s = make_key(std::move(group), std::move(name), Kind::string, fallback, std::move(doc));
  s.allowed = std::move(allowed);
  return s;
}

namespace {

using Strings = std::vector<std::string>;
constexpr auto key = make_key;
constexpr auto integer = make_integer;
constexpr auto choice = make_choice;

// The backends' keys, registered while the program starts; frozen once the schema is built.
struct BackendRegistry {
  std::mutex mu;
  std::vector<BackendKeys> backends;
  bool frozen = false;
};
BackendRegistry& backend_registry() {
  static BackendRegistry r;
  return r;
}

// The policy's own keys' former names (a backend's are in its BackendKeys::renamed).
const std::map<std::string, std::string>& policy_renames() {
  static const std::map<std::string, std::string> m = {
      {"codegen.disable_passes", "passes.disable"},
      {"codegen.dump_passes", "passes.dump"},
      {"launch.barrier_every_n_layers", "launch.layer_layout"},
  };
  return m;
}

// "ed25519:" and 64 hex digits: how keel cache keygen prints a public key (the cache checks
// the key itself when it loads).
bool public_key_form(const std::string& s) {
  constexpr std::string_view kPrefix = "ed25519:";
  if (s.size() != kPrefix.size() + 64 || s.rfind(kPrefix, 0) != 0) return false;
  return std::all_of(s.begin() + kPrefix.size(), s.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

bool layer_layout_form(const std::string& s) {
  return parse_layer_layout(s).has_value();
}

// launch.backend: one of the registered backends; cpu when it is one of them.
KeySpec backend_choice(const std::vector<BackendKeys>& backends) {
  Strings names, docs;
  for (const BackendKeys& b : backends) {
    names.push_back(b.backend);
    docs.push_back(b.backend + ": " + b.doc);
  }
  const bool cpu = std::find(names.begin(), names.end(), "cpu") != names.end();
  return choice("launch", "backend", cpu ? "cpu" : names.front(), names,
                fmt::format("{}", fmt::join(docs, "; ")));
}

// Every key: the schema's own, with `backends`' names and keys (at least one backend).
std::vector<KeySpec> keys_with(const std::vector<BackendKeys>& backends) {
  std::vector<KeySpec> s;
  KeySpec profile = key("launch", "profile", Kind::string, std::string("none"),
                        "the profile this policy came from (chosen with --profile)");
  profile.from_file = false;
  s.push_back(profile);
  s.push_back(integer("launch", "threads", 0, 0, 4096,
                      "OpenMP and BLAS threads; 0: the host's cores shared by its processes"));
  s.push_back(integer("launch", "memory_budget_bytes", 0, 0, INT64_MAX,
                      "refuse a program whose predicted peak, summed over the processes of one "
                      "host that run it, exceeds this; 0: no budget"));
  KeySpec layout =
      key("launch", "layer_layout", Kind::string, std::string("unrolled"),
          "how the step lays out the model's layers: unrolled in one program; scanned (the "
          "repeated block traced once and looped over stacked parameters, keel::scan); or "
          "split:N, a program every N layers (forward, then backward recomputing them) for "
          "memory headroom, the seeds' barrier; split:N/scanned loops each segment's layers");
  layout.matches = layer_layout_form;
  layout.form = "unrolled, scanned, split:N or split:N/scanned with N in 1..4096";
  s.push_back(layout);
  s.push_back(key("launch", "remat_layers", Kind::boolean, false,
                  "with launch.layer_layout = scanned: the backward recomputes each scanned "
                  "layer from its input instead of keeping its activations (less memory for "
                  "one more forward pass of the layers)"));
  s.push_back(choice("launch", "remat_policy", "nothing_saveable",
                     {"nothing_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable"},
                     "with launch.remat_layers: what each recomputed layer keeps for the backward "
                     "(jax.checkpoint_policies): nothing; the products' and attention's outputs "
                     "(the backward recomputes only loops and reductions); or the outputs of "
                     "products without batch dimensions (dense weights; attention and MoE experts "
                     "are recomputed too)"));
  s.push_back(integer("launch", "seed", 0, 0, INT64_MAX, "seed for initialisation and data"));
  s.push_back(backend_choice(backends));

  s.push_back(key("spmd", "enabled", Kind::boolean, false,
                  "build a device mesh from mesh_axes/mesh_shape"));
  KeySpec axes = key("spmd", "mesh_axes", Kind::string_list, Strings{"data"},
                     "mesh axis names, outermost first");
  s.push_back(axes);
  KeySpec shape = key("spmd", "mesh_shape", Kind::integer_list, std::vector<int64_t>{1},
                      "devices along each mesh axis; the product is the process count");
  shape.min = 1;
  shape.max = 65536;
  s.push_back(shape);
  s.push_back(integer("spmd", "collective_timeout_s", 60, 1, 604800,
                      "seconds a collective waits for the other processes before naming the "
                      "ones that did not arrive and ending the launch"));
  s.push_back(integer("spmd", "first_run_timeout_s", 900, 1, 604800,
                      "the same in a program's first run and the agreement before it, which "
                      "wait for every process's compile; keep it above cpu.compile_timeout_s"));

  s.push_back(integer("sharding", "zero", 0, 0, 3,
                      "ZeRO stage over the data axis: 0, every process holds all training state; "
                      "1, AdamW's moments are split over the data axis (each process updates its "
                      "slice of every parameter, then the slices are gathered), bit for bit the "
                      "same run; 2, the reduced gradients are split too (reduce-scattered, the "
                      "norm summed in blocks whatever the process count), bit for bit the same "
                      "run; 3, the parameters are held split too and gathered inside each "
                      "micro-batch, again next to far readers such as the backward (a scanned "
                      "stack a layer at a time inside the scan), bit for bit the same run"));
  s.push_back(key("sharding", "rules", Kind::string_list, Strings{"heads=model", "mlp=model"},
                  "logical dimension=mesh axis, as MaxText's logical axis rules: the model's "
                  "dimensions (embed, experts, heads, head_dim, memory, mlp, vocab) each process "
                  "holds a block of when that axis has more than one device. keel train splits "
                  "heads (the QKV weight per head, the attention output by rows), mlp (the dense "
                  "MLPs' hidden units), and, not in the default, memory (the n-gram memories' "
                  "table rows), experts (MoE layers' routed experts) and vocab (the tied "
                  "embedding's rows) over 'model', and experts over 'data' (expert "
                  "parallelism, with sharding.zero = 3: the tokens travel to the experts by "
                  "all_to_all); a rule that would split another dimension, or over another "
                  "axis of more than one device, or that names no mesh axis, is refused at "
                  "start, as is a 'model' axis no rule uses"));

  s.push_back(key("compile_cache", "dir", Kind::string, std::string(),
                  "executable cache directory ({host} is replaced by the host name); empty: "
                  "$XDG_CACHE_HOME/keel or ~/.cache/keel"));
  s.push_back(choice("compile_cache", "layout", "per_host", {"per_host", "shared"},
                     "per_host: each host writes its own directory (one compile per key per "
                     "host); shared: every host sees it, one elected writer per key in the "
                     "launch compiles, the others wait and load it read-only"));
  s.push_back(choice("compile_cache", "mode", "readwrite",
                     {"readwrite", "readonly", "sealed", "off"},
                     "readonly: never write; sealed: a miss is an error; off: no disk tier"));
  s.push_back(integer("compile_cache", "max_bytes", 0, 0, INT64_MAX,
                      "disk tier size limit, least recently used evicted; 0: unlimited"));
  s.push_back(choice("compile_cache", "unsafe_dir", "error", {"error", "disable"},
                     "a directory others can write: error, or run without the disk tier"));
  s.push_back(key("compile_cache", "forbid_compile", Kind::boolean, false,
                  "any compile is an error (a warm run that must only load)"));
  s.push_back(choice("compile_cache", "signatures", "off", {"off", "recompile", "refuse"},
                     "entries that load: off: any intact one; recompile: only those signed by a "
                     "trusted key, another is reported and compiled here; refuse: another is "
                     "an error"));
  KeySpec trusted = key("compile_cache", "trusted_keys", Kind::string_list, Strings{},
                        "public keys (ed25519:<hex>, from keel cache keygen) whose signed entries "
                        "load when signatures are required");
  trusted.matches = public_key_form;
  trusted.form = "a public key ed25519:<64 hex digits>, as keel cache keygen prints";
  s.push_back(std::move(trusted));
  s.push_back(key("compile_cache", "signing_key", Kind::string, std::string(),
                  "a secret key file (keel cache keygen) that signs every entry this process "
                  "publishes; its public key is trusted too"));
  s.push_back(integer("compile_cache", "lock_timeout_s", 900, 1, 604800,
                      "seconds to wait for another process compiling the same program before "
                      "failing and naming it; keep it above cpu.compile_timeout_s"));

  s.push_back(choice("shape_guard", "mode", "warn", {"off", "warn", "strict"},
                     "after warm-up a new program is explained (warn) or an error (strict)"));
  s.push_back(integer("shape_guard", "warmup_steps", 1, 0, INT64_MAX,
                      "steps that may add programs freely"));
  s.push_back(integer("shape_guard", "max_programs_per_function", 8, 0, 100000,
                      "programs one function may have; 0: no cap"));

  // The lowering every backend runs (passes/).
  KeySpec disabled =
      key("passes", "disable", Kind::string_list, Strings{}, "graph passes to skip (debugging)");
  disabled.allowed = {"canonicalize",          "bf16_operands",     "cse",         "dce",
                      "recompute_elementwise", "place_collectives", "fold_layout", "fuse",
                      "concat_in_place",       "plan_memory"};
  disabled.codegen = true;
  s.push_back(disabled);
  s.push_back(key("passes", "dump", Kind::boolean, false,
                  "write the graph after each pass under diag.dump_dir/passes"));

  // Then each backend's own group, as it registered it.
  for (const BackendKeys& b : backends) s.insert(s.end(), b.keys.begin(), b.keys.end());

  s.push_back(choice("diag", "log_level", "warn", {"error", "warn", "info", "debug"},
                     "least severe message printed to stderr"));
  s.push_back(key("diag", "dump_dir", Kind::string, std::string(),
                  "directory for dumps (passes, generated source); empty: none"));

  KeySpec request = key("features", "request", Kind::string_list, Strings{},
                        "optional features this launch asks for (see keel features)");
  // The registered backends' features, then the general ones; a name two declare is listed once.
  Strings features;
  for (const BackendKeys& b : backends)
    features.insert(features.end(), b.features.begin(), b.features.end());
  for (const Feature& f : general_features()) features.push_back(f.name);
  for (const std::string& f : features) {
    if (std::find(request.allowed.begin(), request.allowed.end(), f) == request.allowed.end()) {
      request.allowed.push_back(f);
    }
  }
  s.push_back(request);
  s.push_back(choice("features", "on_unavailable", "warn", {"warn", "error"},
                     "a requested feature that is unavailable: warn and fall back, or fail"));
  return s;
}

// The schema's own groups (launch, passes, ...): no backend may take one of their names.
std::vector<std::string> own_groups() {
  std::vector<std::string> g;
  for (const KeySpec& k : keys_with({BackendKeys{"none", "", {}, {}, {}}})) {
    if (std::find(g.begin(), g.end(), k.group) == g.end()) g.push_back(k.group);
  }
  return g;
}

// A logic_error, not keel::Error: a program linked without the built-in backends is a build
// mistake, which no reader of input may take for a refusal of bad input (the fuzz targets).
std::vector<KeySpec> build_schema() {
  BackendRegistry& r = backend_registry();
  std::lock_guard lock(r.mu);
  if (r.backends.empty()) {
    throw std::logic_error(
        "[policy] no backend registered its policy keys before the launch policy was read; link "
        "keel_backend_builtin whole, as keel::keel and keel.pc do (-Wl,--whole-archive)");
  }
  r.frozen = true;
  return keys_with(r.backends);
}

bool parse_int(const std::string& text, int64_t& out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && p == end && !text.empty();
}

Strings split_commas(const std::string& text) {
  Strings out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

void register_backend_keys(BackendKeys keys) {
  const std::string& name = keys.backend;
  const bool lower = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
  if (!lower) {
    throw Error(
        fmt::format("[policy] backend name '{}' is not lower-case letters, digits and _; "
                    "register it under such a name",
                    name));
  }
  // Its variables (KEEL_CPU_...) must not begin another group's, or the reverse.
  for (const std::string& g : own_groups()) {
    const std::string a = group_env_prefix(g), b = group_env_prefix(name);
    if (a.starts_with(b) || b.starts_with(a)) {
      throw Error(
          fmt::format("[policy] backend '{}' would share the group or the {}* variables "
                      "of the launch policy's group '{}'; register it under another name",
                      name, b, g));
    }
  }
  std::vector<std::string> seen;
  for (const KeySpec& k : keys.keys) {
    if (k.group != name) {
      throw Error(
          fmt::format("[policy] backend '{}' registered {}: a backend's keys are in its "
                      "own group ({}.*); rename the key",
                      name, k.name(), name));
    }
    if (std::find(seen.begin(), seen.end(), k.key) != seen.end()) {
      throw Error(fmt::format("[policy] backend '{}' registered {} twice; declare each key once",
                              name, k.name()));
    }
    seen.push_back(k.key);
  }
  for (const auto& [before, now] : keys.renamed) {
    const bool own = now.rfind(name + ".", 0) == 0 &&
                     std::find(seen.begin(), seen.end(), now.substr(name.size() + 1)) != seen.end();
    if (!own || before.find('.') == std::string::npos) {
      throw Error(
          fmt::format("[policy] backend '{}' renamed {} to {}: a former name is a \"group.key\" "
                      "and the new one a key the backend registers; fix the pair",
                      name, before, now));
    }
  }
  BackendRegistry& r = backend_registry();
  std::lock_guard lock(r.mu);
  for (const BackendKeys& b : r.backends) {
    if (b.backend == name) {
      throw Error(
          fmt::format("[policy] backend '{}' registered its policy keys twice; register "
                      "each backend once (backend/builtin registers cpu and ref)",
                      name));
    }
  }
  // A former name must be free: no key has it and no other rename claims it; and no key of the
  // backend may have a name already renamed. (Not renamed_keys(): it would lock r.mu again.)
  auto renamed_before = [&](const std::string& dotted) {
    bool claimed = policy_renames().count(dotted) > 0;
    for (const BackendKeys& b : r.backends) claimed = claimed || b.renamed.count(dotted) > 0;
    return claimed;
  };
  for (const KeySpec& k : keys.keys) {
    if (renamed_before(k.name())) {
      throw Error(fmt::format(
          "[policy] backend '{}' registered {}, a name renamed before; choose another key name",
          name, k.name()));
    }
  }
  std::vector<BackendKeys> with = r.backends;
  with.push_back(keys);
  const std::vector<KeySpec> all = keys_with(with);
  for (const auto& [before, now] : keys.renamed) {
    const std::string& former = before;  // clang 14 captures no structured binding
    const bool live =
        std::any_of(all.begin(), all.end(), [&](const KeySpec& k) { return k.name() == former; });
    if (live || renamed_before(before)) {
      throw Error(fmt::format(
          "[policy] backend '{}' renamed {} to {}, but {} is {}; rename only a name no key has",
          name, before, now, before,
          live ? "a key (the policy's or this backend's)" : "already renamed"));
    }
  }
  if (r.frozen) {
    throw Error(fmt::format(
        "[policy] backend '{}' registered its policy keys after the launch policy's schema was "
        "read; register it while the program starts, before any policy is resolved",
        name));
  }
  r.backends.push_back(std::move(keys));
}

std::vector<std::string> policy_backends() {
  BackendRegistry& r = backend_registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> names;
  for (const BackendKeys& b : r.backends) names.push_back(b.backend);
  return names;
}

const std::vector<KeySpec>& policy_schema() {
  static const std::vector<KeySpec> schema = build_schema();
  return schema;
}

const std::vector<std::string>& policy_groups() {
  static const std::vector<std::string> groups = [] {
    std::vector<std::string> g;
    for (const KeySpec& k : policy_schema()) {
      if (std::find(g.begin(), g.end(), k.group) == g.end()) g.push_back(k.group);
    }
    return g;
  }();
  return groups;
}

const std::map<std::string, std::string>& renamed_keys() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> all = policy_renames();
    policy_schema();  // fixes the registered backends
    BackendRegistry& r = backend_registry();
    std::lock_guard lock(r.mu);
    for (const BackendKeys& b : r.backends) all.insert(b.renamed.begin(), b.renamed.end());
    return all;
  }();
  return m;
}

std::string renamed_value_note(const std::string& before) {
  if (before == "launch.barrier_every_n_layers") {
    return " (its value is split:N for N layers, or unrolled for 0)";
  }
  return "";
}

std::optional<std::string> former_name(const std::string& dotted) {
  for (const auto& [before, now] : renamed_keys()) {
    if (now == dotted) return before;
  }
  return std::nullopt;
}

const KeySpec* find_key(const std::string& group, const std::string& name) {
  for (const KeySpec& k : policy_schema()) {
    if (k.group == group && k.key == name) return &k;
  }
  return nullptr;
}

const KeySpec* find_key(const std::string& dotted) {
  size_t dot = dotted.find('.');
  if (dot == std::string::npos) return nullptr;
  return find_key(dotted.substr(0, dot), dotted.substr(dot + 1));
}

std::optional<std::string> check_value(const KeySpec& spec, const Value& v) {
  auto check_int = [&](int64_t i) -> std::optional<std::string> {
    if (i < spec.min || i > spec.max) {
      return spec.max == INT64_MAX ? fmt::format("{} is below {}", i, spec.min)
                                   : fmt::format("{} is outside {}..{}", i, spec.min, spec.max);
    }
    return std::nullopt;
  };
  auto check_string = [&](const std::string& s) -> std::optional<std::string> {
    if (spec.matches && !spec.matches(s)) {
      return fmt::format("{} is not {}", toml_string(s), spec.form);
    }
    if (spec.allowed.empty() ||
        std::find(spec.allowed.begin(), spec.allowed.end(), s) != spec.allowed.end()) {
      return std::nullopt;
    }
    return fmt::format("{} is not one of {}", toml_string(s), fmt::join(spec.allowed, ", "));
  };
  if (const auto* i = std::get_if<int64_t>(&v)) return check_int(*i);
  if (const auto* s = std::get_if<std::string>(&v)) return check_string(*s);
  if (const auto* l = std::get_if<std::vector<int64_t>>(&v)) {
    for (int64_t i : *l) {
      if (auto bad = check_int(i)) return bad;
    }
  }
  if (const auto* l = std::get_if<std::vector<std::string>>(&v)) {
    for (const std::string& s : *l) {
      if (auto bad = check_string(s)) return bad;
    }
  }
  return std::nullopt;
}

std::optional<Value> parse_value_text(const KeySpec& spec, const std::string& text) {
  switch (spec.kind) {
    case Kind::boolean:
      if (text == "true" || text == "1" || text == "yes" || text == "on") return Value(true);
      if (text == "false" || text == "0" || text == "no" || text == "off") return Value(false);
      return std::nullopt;
    case Kind::integer: {
      int64_t i = 0;
      if (!parse_int(text, i)) return std::nullopt;
      return Value(i);
    }
    case Kind::string:
      return Value(text);
    case Kind::string_list:
      return Value(split_commas(text));
    case Kind::integer_list: {
      std::vector<int64_t> out;
      for (const std::string& part : split_commas(text)) {
        int64_t i = 0;
        if (!parse_int(part, i)) return std::nullopt;
        out.push_back(i);
      }
      return Value(out);
    }
  }
  return std::nullopt;
}

}  // namespace keel::policy
