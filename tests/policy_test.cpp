// Launch policy: every validation rule with a file (or variable, or --set) that breaks it, the
// precedence order with origins, extends, freezing, the shipped profiles, features, bundles.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ir/error.h"
#include "ir/utf8_escape.h"
#include "policy/bundle.h"
#include "policy/features.h"
#include "policy/layer_layout.h"
#include "policy/recorded_policy.h"
#include "policy/resolve.h"

namespace keel::policy {
namespace {

namespace fs = std::filesystem;

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("keel-policy-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  PolicySources sources(const std::string& profile) {
    PolicySources s;
    s.profile = profile;
    s.profile_dirs = {dir_.string()};
    return s;
  }
  // The one-line message a bad profile gets.
  std::string error_of(const std::string& text) {
    std::string path = write("bad.toml", text);
    try {
      resolve_policy(sources(path));
    } catch (const InputError& e) {
      std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      EXPECT_EQ(m.rfind("[policy] ", 0), 0u) << m;
      return m;
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return "";
  }
  std::string bad() const { return (dir_ / "bad.toml").string(); }
  // The message variables `env` and --set lines `sets` get; "no error" when they resolve.
  std::string error(std::map<std::string, std::string> env, std::vector<std::string> sets) {
    PolicySources s = sources("");
    s.environment = std::move(env);
    s.sets = std::move(sets);
    try {
      resolve_policy(s);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }

  fs::path dir_;
};

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_F(PolicyTest, UnknownGroupNamesLineAndGroups) {
  std::string m = error_of("[launch]\nthreads = 2\n\n[codgen]\nopt_level = 1\n");
  EXPECT_TRUE(has(m, bad() + ":4: unknown group [codgen]")) << m;
  // cuda's group follows cpu's where the CUDA backend is built.
  EXPECT_TRUE(
      has(m, "groups: launch, spmd, sharding, compile_cache, shape_guard, passes, cpu, diag") ||
      has(m,
          "groups: launch, spmd, sharding, compile_cache, shape_guard, passes, cpu, cuda, "
          "diag"))
      << m;
}

TEST_F(PolicyTest, UnknownKeyNamesLineAndKeys) {
  std::string m = error_of("[cpu]\n\noptlevel = 1\n");
  EXPECT_TRUE(has(m, bad() + ":3: unknown key 'cpu.optlevel'")) << m;
  EXPECT_TRUE(has(m, "keys in [cpu]: compiler, flags, opt_level")) << m;
}

// The CPU backend's keys were codegen.*: every old name, in a profile, --set or a variable, is one
// line naming its new name, which exists.
TEST_F(PolicyTest, RenamedKeysAreRefusedNamingTheNewOne) {
  ASSERT_FALSE(renamed_keys().empty());
  for (const auto& [before, now] : renamed_keys()) {
    ASSERT_NE(find_key(now), nullptr) << now;
    EXPECT_EQ(find_key(before), nullptr) << before;
    EXPECT_EQ(former_name(now), before);
    const std::string why = before + " is now " + now;
    const std::string group = before.substr(0, before.find('.'));
    const std::string key = before.substr(before.find('.') + 1);
    EXPECT_TRUE(has(error_of("[" + group + "]\n" + key + " = 1\n"), why)) << before;
    EXPECT_TRUE(has(error({}, {before + "=1"}), why)) << before;
    std::string env = "KEEL_" + before;
    for (char& c : env) c = c == '.' ? '_' : static_cast<char>(std::toupper(c));
    EXPECT_TRUE(has(error({{env, "1"}}, {}), why)) << env;
  }
}

// The layer layout is one setting: unrolled, scanned, or split:N; nothing else parses.
TEST(LayerLayout, ParsesItsThreeForms) {
  EXPECT_FALSE(parse_layer_layout("unrolled")->scanned);
  EXPECT_EQ(parse_layer_layout("unrolled")->split_every, 0);
  EXPECT_TRUE(parse_layer_layout("scanned")->scanned);
  EXPECT_EQ(parse_layer_layout("split:1")->split_every, 1);
  EXPECT_EQ(parse_layer_layout("split:4096")->split_every, 4096);
  EXPECT_FALSE(parse_layer_layout("split:2")->scanned);
  EXPECT_TRUE(parse_layer_layout("split:2/scanned")->scanned);  // each segment's layers looped
  EXPECT_EQ(parse_layer_layout("split:2/scanned")->split_every, 2);
  for (const char* bad : {"", "split", "split:", "split:0", "split:4097", "split:-1", "split:1x",
                          "split: 2", "Scanned", "split:99999999999999999999", "scanned/scanned",
                          "split:0/scanned", "split:2/", "unrolled/scanned"}) {
    EXPECT_EQ(parse_layer_layout(bad), std::nullopt) << bad;
  }
}

TEST_F(PolicyTest, WrongTypesSayWhatIsAllowed) {
  EXPECT_TRUE(has(error_of("[cpu]\nopt_level = \"2\"\n"),
                  ":2: cpu.opt_level must be an integer in 0..3, got a string"));
  EXPECT_TRUE(has(error_of("[cpu]\nopt_level = 2.0\n"), "got a float"));
  EXPECT_TRUE(
      has(error_of("[spmd]\nenabled = 1\n"), "spmd.enabled must be a boolean, got an integer"));
  EXPECT_TRUE(has(error_of("[cpu]\nflags = [1, 2]\n"),
                  "cpu.flags must be an array of strings, got an array holding an integer"));
  EXPECT_TRUE(has(error_of("[cpu]\nflags = \"-O3\"\n"), "got a string"));
  EXPECT_TRUE(has(error_of("launch = 3\n"), ":1: launch must be a table"));
}

TEST_F(PolicyTest, OutOfRangeAndNotAllowedValues) {
  EXPECT_TRUE(has(error_of("[cpu]\nopt_level = 7\n"),
                  ":2: cpu.opt_level: 7 is outside 0..3; allowed: an integer in 0..3"));
  EXPECT_TRUE(has(error_of("[launch]\nthreads = -1\n"), "launch.threads: -1 is outside 0..4096"));
  EXPECT_TRUE(has(error_of("[compile_cache]\nmax_bytes = -5\n"), "-5 is below 0"));
  EXPECT_TRUE(has(error_of("[shape_guard]\nmode = \"fast\"\n"),
                  "shape_guard.mode: \"fast\" is not one of off, warn, strict"));
  EXPECT_TRUE(
      has(error_of("[passes]\ndisable = [\"cse\", \"bogus\"]\n"),
          "\"bogus\" is not one of canonicalize, bf16_operands, cse, dce, recompute_elementwise, "
          "place_collectives, fold_layout, fuse, concat_in_place, plan_memory"));
  EXPECT_TRUE(has(error_of("[spmd]\nmesh_shape = [2, 0]\n"), "0 is outside 1..65536"));
  EXPECT_TRUE(
      has(error_of("[features]\nrequest = [\"warp_drive\"]\n"), "\"warp_drive\" is not one of"));
}

// A trusted key that cannot be one fails where it is written, not at the first cache open.
TEST_F(PolicyTest, TrustedKeysMustBePublicKeys) {
  const std::string key = "ed25519:" + std::string(64, 'a');
  EXPECT_NO_THROW(resolve_policy(
      sources(write("key.toml", "[compile_cache]\ntrusted_keys = [\"" + key + "\"]\n"))));
  EXPECT_TRUE(has(error_of("[compile_cache]\ntrusted_keys = [\"" + key + "\", \"bad\"]\n"),
                  ":2: compile_cache.trusted_keys: \"bad\" is not a public key ed25519:<64 hex "
                  "digits>, as keel cache keygen prints"));
  EXPECT_TRUE(has(error_of("[compile_cache]\ntrusted_keys = [\"" + key.substr(0, 71) + "g\"]\n"),
                  "is not a public key"));
}

// Values print as TOML reads them back: quotes, backslashes and control characters escaped.
TEST_F(PolicyTest, ValueTextEscapesStrings) {
  EXPECT_EQ(value_text(Value{std::string("a\"b\\c\n\x07\x7f")}),
            "\"a\\\"b\\\\c\\n\\u0007\\u007F\"");
  EXPECT_EQ(value_text(Value{std::vector<std::string>{"x", "\t"}}), "[\"x\", \"\\t\"]");
}

TEST_F(PolicyTest, SyntaxErrorsNameTheLine) {
  std::string m = error_of("[launch]\nthreads = = 2\n");
  EXPECT_TRUE(has(m, bad() + ":2: not valid TOML")) << m;
}

TEST_F(PolicyTest, RulesAcrossKeys) {
  std::string m = error_of("[spmd]\nmesh_axes = [\"data\", \"model\"]\nmesh_shape = [2]\n");
  EXPECT_TRUE(
      has(m, ":2: spmd.mesh_axes has 2 names but spmd.mesh_shape (" + bad() + ":3) has 1 sizes"))
      << m;
  EXPECT_TRUE(has(error_of("[spmd]\nmesh_axes = [\"a\", \"a\"]\nmesh_shape = [1, 1]\n"),
                  "must be distinct"));
  EXPECT_TRUE(
      has(error_of("[passes]\ndump = true\n"), ":2: passes.dump = true needs diag.dump_dir"));
  EXPECT_TRUE(has(error_of("[launch]\nprofile = \"x\"\n"),
                  ":2: launch.profile is chosen at launch (--profile or KEEL_LAUNCH_PROFILE)"));
}

TEST_F(PolicyTest, ExtendsAppliesTheBaseFirstAndFindsCycles) {
  write("base.toml", "[cpu]\nopt_level = 1\ncompiler = \"g++\"\n");
  std::string child = write("child.toml", "extends = \"base\"\n[cpu]\nopt_level = 3\n");
  LaunchPolicy p = resolve_policy(sources("child"));
  EXPECT_EQ(p.integer("cpu.opt_level"), 3);
  EXPECT_EQ(p.setting("cpu.opt_level").origin.text(), child + ":3");
  EXPECT_EQ(p.string("cpu.compiler"), "g++");
  EXPECT_EQ(p.setting("cpu.compiler").origin.text(), (dir_ / "base.toml").string() + ":3");
  EXPECT_EQ(p.string("launch.profile"), "child");
  write("a.toml", "extends = \"b\"\n");
  write("b.toml", "extends = \"a\"\n");
  EXPECT_THROW(
      {
        try {
          resolve_policy(sources("a"));
        } catch (const InputError& e) {
          EXPECT_TRUE(has(e.what(), "extends itself (a cycle)")) << e.what();
          throw;
        }
      },
      InputError);
  std::string m = error_of("extends = \"missing\"\n");
  EXPECT_TRUE(has(m, "no profile of that name")) << m;
  EXPECT_TRUE(has(m, "(extended at " + bad() + ":1)")) << m;
}

// A name longer than a file name may be cannot be stat'ed (ENAMETOOLONG): it is no profile, said
// in one line, not a std::filesystem error escaping (found by fuzz_profile after 7.7M inputs).
TEST_F(PolicyTest, NamesTooLongForAFileAreNoProfile) {
  const std::string name(300, 'a');
  std::string m = error_of("extends = \"" + name + "\"\n");
  EXPECT_TRUE(has(m, "[policy] --profile " + name + ": no profile of that name")) << m;
  EXPECT_TRUE(has(m, "(extended at " + bad() + ":1)")) << m;
  EXPECT_THROW(resolve_policy(sources(name)), InputError);
}

TEST_F(PolicyTest, PrecedenceDefaultFileEnvironmentSet) {
  std::string file = write("p.toml",
                           "[cpu]\nopt_level = 1\n[launch]\nthreads = 3\nseed = 5\n"
                           "[compile_cache]\nmode = \"readonly\"\n");
  PolicySources s = sources(file);
  s.environment = {{"KEEL_LAUNCH_THREADS", "4"}, {"KEEL_LAUNCH_SEED", "6"}, {"KEEL_HOME", "x"}};
  s.sets = {"launch.seed=7", "cpu.flags=-march=x86-64,-fopenmp"};
  LaunchPolicy p = resolve_policy(s);
  EXPECT_EQ(p.integer("cpu.opt_level"), 1);  // file
  EXPECT_EQ(p.setting("cpu.opt_level").origin.text(), file + ":2");
  EXPECT_EQ(p.integer("launch.threads"), 4);  // environment beats the file
  EXPECT_EQ(p.setting("launch.threads").origin.text(), "env KEEL_LAUNCH_THREADS");
  EXPECT_EQ(p.integer("launch.seed"), 7);  // --set beats both
  EXPECT_EQ(p.setting("launch.seed").origin.text(), "--set launch.seed=7");
  EXPECT_EQ(p.strings("cpu.flags"), (std::vector<std::string>{"-march=x86-64", "-fopenmp"}));
  EXPECT_EQ(p.string("shape_guard.mode"), "warn");  // default
  EXPECT_EQ(p.setting("shape_guard.mode").origin.text(), "default");
  EXPECT_EQ(p.string("compile_cache.mode"), "readonly");
  EXPECT_TRUE(has(p.to_text(), "seed = 7")) << p.to_text();
  EXPECT_TRUE(has(p.to_json(true), "\"origin\": \"env KEEL_LAUNCH_THREADS\""));
}

// A list given as a profile spells it, a TOML array, is its items; not one literal item.
TEST_F(PolicyTest, ListsTakeTheProfilesArraySpelling) {
  PolicySources s = sources("");
  s.environment = {{"KEEL_SPMD_MESH_SHAPE", "[1]"}};
  s.sets = {"cpu.flags=[\"-g\", \"-fno-plt,x\"]", "features.request=[]"};
  LaunchPolicy p = resolve_policy(s);
  EXPECT_EQ(p.strings("cpu.flags"), (std::vector<std::string>{"-g", "-fno-plt,x"}));
  EXPECT_TRUE(p.strings("features.request").empty());
  EXPECT_EQ(p.integers("spmd.mesh_shape"), (std::vector<int64_t>{1}));
  auto error = [&](const std::string& set) {
    PolicySources bad = sources("");
    bad.sets = {set};
    try {
      resolve_policy(bad);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_TRUE(has(error("cpu.flags=[1, 2]"),
                  "--set cpu.flags=[1, 2]: cpu.flags must be an array of strings, got an "
                  "array holding an integer"))
      << error("cpu.flags=[1, 2]");
  EXPECT_TRUE(has(error("cpu.flags=[\"-g\""), "must be an array of strings, got"));
  EXPECT_TRUE(has(error("cpu.flags=[\"-g\"]\nx = 1"), "must be an array of strings, got"));
}

// Values and origins are any bytes (a directory from the environment): the dump is valid JSON
// and decodes to them.
TEST_F(PolicyTest, JsonCarriesAnyBytes) {
  PolicySources s = sources("");
  s.environment = {{"KEEL_COMPILE_CACHE_DIR", "/tmp/caf\xe9"}};
  s.sets = {"cpu.flags=-I/x\xff,-O2"};
  LaunchPolicy p = resolve_policy(s);
  const nlohmann::json j = nlohmann::json::parse(p.to_json(true));
  EXPECT_EQ(utf8_to_bytes(j["compile_cache"]["dir"]["value"].get<std::string>()), "/tmp/caf\xe9");
  EXPECT_EQ(utf8_to_bytes(j["cpu"]["flags"]["value"].get<std::vector<std::string>>()),
            (std::vector<std::string>{"-I/x\xff", "-O2"}));
  EXPECT_EQ(utf8_to_bytes(j["cpu"]["flags"]["origin"].get<std::string>()),
            "--set cpu.flags=-I/x\xff,-O2");
}

TEST_F(PolicyTest, ProfileFromTheEnvironmentAndNone) {
  write("fast.toml", "[cpu]\nopt_level = 3\n");
  PolicySources s = sources("");
  s.environment = {{"KEEL_LAUNCH_PROFILE", "fast"}};
  LaunchPolicy p = resolve_policy(s);
  EXPECT_EQ(p.integer("cpu.opt_level"), 3);
  EXPECT_EQ(p.setting("launch.profile").origin.text(), "env KEEL_LAUNCH_PROFILE");
  s.profile = "none";  // --profile beats the variable; none is the defaults
  LaunchPolicy none = resolve_policy(s);
  EXPECT_EQ(none.integer("cpu.opt_level"), 2);
  EXPECT_EQ(none.to_json(false), LaunchPolicy().to_json(false));
}

TEST_F(PolicyTest, BadVariablesAndOverridesAreOneLineErrors) {
  EXPECT_TRUE(
      has(error({{"KEEL_CPU_OPT_LEVEL", "high"}}, {}),
          "env KEEL_CPU_OPT_LEVEL: cpu.opt_level must be an integer in 0..3, got \"high\""));
  EXPECT_TRUE(has(error({{"KEEL_CODEGEN_OPTLEVEL", "1"}}, {}),
                  "env KEEL_CODEGEN_OPTLEVEL: no longer read; the [codegen] group is now [cpu]"));
  EXPECT_TRUE(has(error({{"KEEL_CPU_OPTLEVEL", "1"}}, {}),
                  "env KEEL_CPU_OPTLEVEL: no such setting in [cpu]"));
  EXPECT_TRUE(
      has(error({{"KEEL_CACHE_DIR", "/x"}}, {}), "no longer read; use KEEL_COMPILE_CACHE_DIR"));
  EXPECT_TRUE(has(error({{"KEEL_SPMD_ENABLED", "maybe"}}, {}), "must be a boolean"));
  EXPECT_TRUE(has(error({}, {"cpu.opt=1"}), "--set cpu.opt=1: unknown key 'cpu.opt'"));
  EXPECT_TRUE(has(error({}, {"cpu.opt_level"}), "expected group.key=value"));
  EXPECT_TRUE(has(error({}, {"cpu.opt_level=9"}),
                  "--set cpu.opt_level=9: cpu.opt_level: 9 is outside 0..3"));
  EXPECT_TRUE(has(error({}, {"launch.profile=ci"}), "choose the profile with --profile"));
  EXPECT_TRUE(has(error({}, {"spmd.mesh_shape=2,x"}), "must be an array of integers"));
  EXPECT_EQ(error({{"KEEL_DEMO_STEPS", "3"}}, {}), "no error");  // not a policy group
}

TEST_F(PolicyTest, UnknownProfileListsTheKnownOnes) {
  write("fast.toml", "");
  try {
    resolve_policy(sources("slow"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "--profile slow: no profile of that name; profiles: fast, none"))
        << e.what();
  }
  EXPECT_THROW(resolve_policy(sources((dir_ / "nope.toml").string())), InputError);
}

TEST_F(PolicyTest, AFrozenPolicyRefusesChanges) {
  LaunchPolicy p;
  p.set("cpu.opt_level", int64_t{1}, {Origin::Source::command_line, "--set"});
  p.freeze();
  try {
    p.set("cpu.opt_level", int64_t{3}, {Origin::Source::command_line, "--set"});
    FAIL();
  } catch (const InputError&) {
    FAIL() << "a frozen policy is a runtime rule, not bad input";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "frozen by Runtime::init")) << e.what();
  }
  EXPECT_EQ(p.integer("cpu.opt_level"), 1);
}

TEST_F(PolicyTest, ShippedProfilesAreValid) {
  std::vector<std::string> names = list_profiles({KEEL_SOURCE_DIR "/profiles"});
  EXPECT_GE(names.size(), 4u);
  for (const std::string& name : names) {
    PolicySources s;
    s.profile = name;
    s.profile_dirs = {KEEL_SOURCE_DIR "/profiles"};
    EXPECT_NO_THROW(resolve_policy(s)) << name;
  }
  EXPECT_EQ(check_profile_file(KEEL_SOURCE_DIR "/profiles/ci.toml", {KEEL_SOURCE_DIR "/profiles"})
                .string("shape_guard.mode"),
            "strict");  // from train.toml, which ci extends
}

TEST(Schema, EnvironmentNamesAndAllowedText) {
  const KeySpec* k = find_key("compile_cache.max_bytes");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->env_name(), "KEEL_COMPILE_CACHE_MAX_BYTES");
  EXPECT_EQ(find_key("shape_guard", "mode")->allowed_text(), "one of off, warn, strict");
  EXPECT_EQ(find_key("nope.key"), nullptr);
  for (const KeySpec& s : policy_schema()) {
    EXPECT_FALSE(check_value(s, s.fallback).has_value()) << s.name() << " default not allowed";
    EXPECT_FALSE(s.doc.empty()) << s.name();
  }
}

TEST(Features, GeneralOnesAreAvailableAndAnUnknownNameIsRefused) {
  std::vector<Feature> t = general_features();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(find_feature(t, "scan_layers").available);
  EXPECT_TRUE(find_feature(t, "mpi").available);
  try {
    find_feature(t, "warp_drive");
    FAIL() << "an unknown feature was found";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "unknown feature 'warp_drive'; features: scan_layers, mpi"))
        << e.what();
  }
}

// keel cache prewarm RUN_DIR takes the recorded run's own choices of codegen keys: only those
// the run set (not its defaults), only where this launch kept the default (no --set, KEEL_*
// variable or profile chose it), never other groups, and never the compiler, its flags or the
// BLAS library (a record is data; those are reported as not taken). This record was written
// before the keys were renamed (codegen.* to cpu.* and passes.*): it is read under the old names.
TEST(RecordedPolicy, TakesTheRunsCodegenChoicesWhereThisLaunchKeptDefaults) {
  const std::string compiler = bytes_to_utf8(std::string("/opt/c\xff++"));
  const std::string recorded = R"({
    "codegen": {"opt_level": {"value": 1, "origin": "--set cpu.opt_level=1"},
                "matmul_precision": {"value": "bf16", "origin": "default"},
                "disable_passes": {"value": ["cse", "remat"], "origin": "profiles/x.toml:3"},
                "compiler": {"value": ")" +
                               compiler + R"(", "origin": "--set"},
                "flags": {"value": ["-O1", "-fopenmp"], "origin": "env KEEL_CPU_FLAGS"}},
    "launch": {"seed": {"value": 7, "origin": "--set launch.seed=7"}}})";
  PolicySources mine;
  mine.profile = "none";
  mine.profile_dirs = {"/nonexistent"};
  LaunchPolicy p = resolve_policy(mine);
  const RecordedChoices got = adopt_recorded_codegen(p, recorded, "run/record.json");
  EXPECT_EQ(got.taken,  // the pass remat is recompute_elementwise now
            (std::vector<std::string>{"passes.disable = [\"cse\", \"recompute_elementwise\"]",
                                      "cpu.opt_level = 1"}));
  EXPECT_EQ(got.not_taken, (std::vector<std::string>{"cpu.compiler = \"/opt/c\xff++\"",
                                                     "cpu.flags = [\"-O1\", \"-fopenmp\"]"}));
  EXPECT_EQ(p.integer("cpu.opt_level"), 1);
  EXPECT_EQ(p.setting("cpu.opt_level").origin.text(), "run/record.json");
  EXPECT_EQ(p.string("cpu.matmul_precision"), "f32");  // the run's default: not a choice
  EXPECT_EQ(p.string("cpu.compiler"), "c++");
  EXPECT_EQ(p.integer("launch.seed"), 0);  // not a codegen key
  // A key this launch chose itself, on the command line or in the environment, is kept.
  for (bool by_env : {false, true}) {
    PolicySources own = mine;
    if (by_env) {
      own.environment["KEEL_CPU_OPT_LEVEL"] = "3";
    } else {
      own.sets = {"cpu.opt_level=3"};
    }
    LaunchPolicy q = resolve_policy(own);
    adopt_recorded_codegen(q, recorded, "run/record.json");
    EXPECT_EQ(q.integer("cpu.opt_level"), 3) << (by_env ? "environment" : "--set");
  }
  // A record with today's names, which win over a former name beside them.
  LaunchPolicy today = resolve_policy(mine);
  const RecordedChoices now = adopt_recorded_codegen(
      today,
      R"({"cpu": {"opt_level": {"value": 0, "origin": "--set cpu.opt_level=0"}},
          "codegen": {"opt_level": {"value": 1, "origin": "--set"}},
          "passes": {"disable": {"value": ["fuse"], "origin": "--set passes.disable=fuse"}}})",
      "run/record.json");
  EXPECT_EQ(now.taken,
            (std::vector<std::string>{"passes.disable = [\"fuse\"]", "cpu.opt_level = 0"}));
  // A recorded value this build does not allow, or a damaged entry, is one line naming the
  // record and the key.
  for (const char* bad : {R"({"codegen": {"opt_level": {"value": 9, "origin": "--set"}}})",
                          R"({"codegen": {"opt_level": {"value": 1, "origin": null}}})"}) {
    LaunchPolicy r = resolve_policy(mine);
    try {
      adopt_recorded_codegen(r, bad, "run/record.json");
      FAIL() << "taken: " << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("[policy] run/record.json: "), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("cpu.opt_level"), std::string::npos) << e.what();
    }
  }
}

TEST(BundleTest, DifferencesNameTheFields) {
  Bundle a = detect_bundle("c++", "g++ 12", {"-O2"}, {{"blas", "OpenBLAS 0.3.21"}});
  Bundle b = detect_bundle("c++", "g++ 12", {"-O1"}, {{"blas", "OpenBLAS 0.3.26"}});
  EXPECT_NE(a.hash(), b.hash());
  std::vector<std::string> d = a.differences(b);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], "blas: OpenBLAS 0.3.21 -> OpenBLAS 0.3.26");
  EXPECT_EQ(d[1], "compiler.flags: -O2 -> -O1");
  EXPECT_FALSE(a.fields.at("keel.revision").empty());
  // The host's fields name the host, not a backend's policy group (cpu.* are launch keys).
  EXPECT_FALSE(a.fields.at("host.cpu_model").empty());
  EXPECT_TRUE(a.fields.count("host.cpu_features"));
  for (const auto& [name, value] : a.fields) EXPECT_NE(name.rfind("cpu.", 0), 0u) << name;
  EXPECT_EQ(Bundle::from_json(a.to_json(), "t").hash(), a.hash());
}

// The build stamps a hash of keel's sources (cmake/revision.cmake; tests/revision_test.sh checks
// that it follows the sources), so two uncommitted builds of different code differ.
TEST(BundleTest, CarriesTheSourceHash) {
  const std::string h = detect_bundle("c++", "g++ 12", {"-O2"}, {}).fields.at("keel.sources");
  ASSERT_EQ(h.size(), 16u) << h;
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos) << h;
}

// A compiler or BLAS path from the environment is any bytes: valid JSON, read back exactly,
// and a bundle of valid UTF-8 hashes as it always did.
TEST(BundleTest, AnyBytesRoundTripThroughJson) {
  Bundle b;
  b.fields = {{"compiler", "/opt/caf\xe9/c++"}, {"blas.library", "\xff\xfe.so"}, {"os", "Linux"}};
  const std::string text = b.to_json();
  EXPECT_TRUE(nlohmann::json::accept(text)) << text;
  EXPECT_EQ(Bundle::from_json(text, "t").fields, b.fields);
  Bundle plain;
  plain.fields = {{"compiler", "c++"}, {"os", "Linux \xc3\xa9"}};
  EXPECT_EQ(plain.to_json(), nlohmann::json(plain.fields).dump());
}

}  // namespace
}  // namespace keel::policy
