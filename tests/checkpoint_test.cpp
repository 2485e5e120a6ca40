// checkpoint tests: safetensors (round trip, byte layout, every corruption), checkpoint
// directories (publish, list, prune, replace, read errors, crashes), copy_into, and
// TensorBoard event files (CRC vectors, records, name, corruption).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "diag/tb_events.h"
#include "files/publish.h"
#include "ir/array.h"
#include "ir/error.h"
#include "ir/version.h"
#include "tests/subprocess.h"
#include "tests/temp_dir.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
#include "train/trainer_json.h"

namespace keel::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_support::reap_child;

using testing_support::slurp;
using testing_support::write;
class TempDir : public testing_support::TempDir {
 public:
  TempDir() : testing_support::TempDir("checkpoint_test") {}
};

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// The message of the keel::InputError `f` throws; a marker when it throws nothing or another type.
template <class F>
std::string input_error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not an InputError: ") + e.what() + ">";
  }
  return "<no error>";
}

Array f32(Shape shape, float start) {
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + 0.5f * static_cast<float>(i);
  return Array::from_f32(std::move(shape), v);
}

Array ints(Shape shape, DType dtype, int64_t start) {
  std::vector<int64_t> v(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<int64_t>(i) * 7;
  return Array::from_i64(std::move(shape), v, dtype);
}

Array bf16(Shape shape, float start) {
  Array a(DType::bf16, std::move(shape));
  for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, start - 0.25 * static_cast<double>(i));
  return a;
}

Array bools(Shape shape) {
  Array a(DType::boolean, std::move(shape));
  for (int64_t i = 0; i < a.numel(); ++i) a.set_i64(i, i % 3 == 0);
  return a;
}

void expect_same(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, x] : a) {
    ASSERT_TRUE(b.contains(name)) << name;
    const Array& y = b.at(name);
    EXPECT_EQ(x.dtype(), y.dtype()) << name;
    EXPECT_EQ(x.shape(), y.shape()) << name;
    EXPECT_TRUE(x.same_bytes(y)) << name << ": " << x.str() << " vs " << y.str();
  }
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// ---------------------------------------------------------------- safetensors

TEST(Safetensors, RoundTripsEveryDtypeIncludingScalarsAndEmptyTensors) {
  TempDir dir;
  TensorMap t = {{"f32", f32({2, 3}, -1.5f)},
                 {"bf16", bf16({4}, 3.0f)},
                 {"i32", ints({3, 1}, DType::i32, -5)},
                 {"i64", ints({2}, DType::i64, int64_t{1} << 40)},
                 {"bool", bools({5})},
                 {"scalar", Array::scalar(42.25)},
                 {"empty_i64", Array(DType::i64, {0, 3})},
                 {"empty_bf16", Array(DType::bf16, {0})},
                 {"scalar_bool", Array::scalar(1, DType::boolean)}};
  const std::string path = dir / "t.safetensors";
  write_safetensors(path, t, {{"run", "abc"}});
  SafetensorsFile r = read_safetensors(path);
  expect_same(t, r.tensors);
  EXPECT_EQ(r.tensors.at("scalar").shape(), Shape{});
  EXPECT_EQ(r.tensors.at("i64").get_i64(0), int64_t{1} << 40);
  EXPECT_EQ(r.metadata,
            (std::map<std::string, std::string>{
                {"format", "pt"}, {"run", "abc"}, {kChecksumKey, tensors_checksum(t)}}));
}

TEST(Safetensors, EmptyMapRoundTrips) {
  TempDir dir;
  write_safetensors(dir / "e.safetensors", {});
  SafetensorsFile r = read_safetensors(dir / "e.safetensors");
  EXPECT_TRUE(r.tensors.empty());
  EXPECT_EQ(r.metadata.at("format"), "pt");
}

TEST(Safetensors, LayoutIsByteExact) {
  TempDir dir;
  const std::string path = dir / "l.safetensors";
  TensorMap t = {{"b", ints({3}, DType::i32, 1)}, {"a", f32({2}, 0.25f)}};
  write_safetensors(path, t);
  const std::string bytes = slurp(path);
  const std::string expected_header = R"({"__metadata__":{"format":"pt","keel.checksum":")" +
                                      tensors_checksum(t) +
                                      R"("},"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},)"
                                      R"("b":{"data_offsets":[8,20],"dtype":"I32","shape":[3]}})";
  const size_t padded = (expected_header.size() + 7) / 8 * 8;
  ASSERT_EQ(bytes.size(), 8 + padded + 20);
  EXPECT_EQ(bytes.substr(0, 8), u64_le(padded));  // little-endian header length
  EXPECT_EQ(bytes.substr(8, padded),
            expected_header + std::string(padded - expected_header.size(), ' '));
  // Tensors in key order, contiguous from the start of the data block.
  EXPECT_EQ(bytes.substr(8 + padded, 8),
            std::string(reinterpret_cast<const char*>(t.at("a").data()), 8));
  EXPECT_EQ(bytes.substr(16 + padded, 12),
            std::string(reinterpret_cast<const char*>(t.at("b").data()), 12));
}

// What another tool sees: a parse written here from the format description, not keel's reader.
// Tensors handed over one at a time (a checkpoint's split moments) make the same file, byte for
// byte, checksum included.
TEST(Safetensors, StreamedIsTheSameFile) {
  TempDir d;
  TensorMap t;
  t["b"] = Array::from_f32({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  t["a"] = Array::from_i64({3}, std::vector<int64_t>{7, -8, 9});
  t["c"] = Array::full({0, 4}, 0.0);
  write_safetensors(d.str() + "/whole.safetensors", t, {{"note", "x"}});
  std::map<std::string, TensorType> types;
  for (const auto& [name, a] : t) types[name] = {a.dtype(), a.shape()};
  std::vector<std::string> asked;
  write_safetensors_streamed(d.str() + "/streamed.safetensors", types,
                             [&](const std::string& name) {
                               asked.push_back(name);
                               return t.at(name);
                             },
                             {{"note", "x"}});
  EXPECT_EQ(asked, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(slurp(d.str() + "/streamed.safetensors"), slurp(d.str() + "/whole.safetensors"));
  EXPECT_EQ(read_safetensors(d.str() + "/streamed.safetensors").tensors.at("b").get_f64(5), 6.0);
}

TEST(Safetensors, IndependentParserReadsWhatKeelWrites) {
  TempDir dir;
  const std::string path = dir / "i.safetensors";
  TensorMap t = {{"w", f32({3, 2}, 1.0f)},
                 {"z", f32({0}, 0)},
                 {"m", f32({4}, -2.0f)},
                 {"n", ints({2, 2}, DType::i64, 9)}};
  write_safetensors(path, t, {{"note", "x y"}});
  const std::string bytes = slurp(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes[8], '{');
  const json h = json::parse(bytes.substr(8, n));
  EXPECT_EQ(h["__metadata__"],
            json({{"format", "pt"}, {"note", "x y"}, {kChecksumKey, tensors_checksum(t)}}));
  const std::string data = bytes.substr(8 + n);
  uint64_t covered = 0;
  for (const auto& [name, a] : t) {
    const json& e = h.at(name);
    EXPECT_EQ(e["dtype"], name == "n" ? "I64" : "F32");
    EXPECT_EQ(e["shape"].get<Shape>(), a.shape());
    const auto off = e["data_offsets"].get<std::vector<uint64_t>>();
    ASSERT_EQ(off.size(), 2u);
    EXPECT_EQ(off[0], covered) << name;  // contiguous, in key order
    covered = off[1];
    EXPECT_EQ(data.substr(off[0], off[1] - off[0]),
              std::string(reinterpret_cast<const char*>(a.data()), a.nbytes()))
        << name;
  }
  EXPECT_EQ(covered, data.size());
  EXPECT_EQ(h.size(), t.size() + 1);
}

TEST(Safetensors, FormatIsAlwaysPt) {
  TempDir dir;
  write_safetensors(dir / "m.safetensors", {{"a", f32({1}, 1)}}, {{"format", "np"}, {"k", "v"}});
  EXPECT_EQ(
      read_safetensors(dir / "m.safetensors").metadata,
      (std::map<std::string, std::string>{
          {"format", "pt"}, {"k", "v"}, {kChecksumKey, tensors_checksum({{"a", f32({1}, 1)}})}}));
}

TEST(Safetensors, LeavesNoTemporaryFiles) {
  TempDir dir;
  write_safetensors(dir / "a.safetensors", {{"x", f32({8}, 1)}});
  write_safetensors(dir / "a.safetensors", {{"x", f32({4}, 2)}});  // replaces
  EXPECT_EQ(names_in(dir.str()), std::set<std::string>{"a.safetensors"});
  EXPECT_EQ(read_safetensors(dir / "a.safetensors").tensors.at("x").shape(), Shape{4});
  // A write that fails leaves the published file and no temporary.
  EXPECT_THROW(write_safetensors(dir / "a.safetensors", {{"__metadata__", f32({1}, 0)}}), Error);
  EXPECT_THROW(write_safetensors(dir / "missing/b.safetensors", {{"x", f32({1}, 0)}}), Error);
  EXPECT_EQ(names_in(dir.str()), std::set<std::string>{"a.safetensors"});
  EXPECT_EQ(read_safetensors(dir / "a.safetensors").tensors.at("x").shape(), Shape{4});
}

// A file from a header text (padded here to 8) and a data block.
std::string st_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return u64_le(header.size()) + header + data;
}

struct Corruption {
  const char* what;
  std::string bytes;
  const char* expected;
};

// The checksum covers every tensor's name, dtype, shape and bytes; a file damaged after it was
// written is refused, naming it; a file from another tool (no checksum) is read unchecked.
TEST(Safetensors, DamagedDataFailsTheChecksum) {
  TempDir dir;
  const std::string path = dir / "c.safetensors";
  const TensorMap t = {{"a", f32({4}, 1.0f)}, {"b", f32({2}, 2.0f)}};
  write_safetensors(path, t);
  EXPECT_TRUE(read_safetensors(path).metadata.at(kChecksumKey).starts_with("xxh3-128:"));
  EXPECT_NE(tensors_checksum(t), tensors_checksum({{"a", f32({4}, 1.0f)}, {"c", f32({2}, 2.0f)}}));
  EXPECT_NE(tensors_checksum(t),
            tensors_checksum({{"a", f32({2, 2}, 1.0f)}, {"b", f32({2}, 2.0f)}}));
  std::string bytes = slurp(path);
  bytes[bytes.size() - 3] ^= 0x10;  // one bit of b's last element
  write(path, bytes);
  try {
    read_safetensors(path);
    ADD_FAILURE() << "a damaged file was read";
  } catch (const InputError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("[safetensors] " + path +
                                                  ": its tensors do not match the checksum"))
        << e.what();
  }
  write(path, st_file(R"({"a":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}})", "abcd"));
  EXPECT_EQ(read_safetensors(path).tensors.size(), 1u);
}

TEST(Safetensors, EachCorruptionIsOneLineNamingTheProblem) {
  TempDir dir;
  const std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string good = st_file(good_header, std::string(8, 'x'));
  const std::vector<Corruption> cases = {
      {"shorter than the length prefix", "abcde", "file is 5 bytes, shorter than the 8-byte"},
      {"header length beyond the file", u64_le(1000) + "{}      ",
       "header length 1000 (bytes 0-7) goes beyond the end of the file (16 bytes)"},
      {"header claims more than 100 MB", u64_le(200'000'000) + "{}      ",
       "header length 200000000 (bytes 0-7) is above the 100 MB limit"},
      {"data cut short", good.substr(0, good.size() - 4),
       "tensor \"a\" ends at data byte 8 but the data block is 4 bytes"},
      {"not JSON", st_file("{not json}", ""), "header is not JSON (parse error at file byte"},
      {"not an object", st_file("[1,2]", ""), "header at byte 8 is not a JSON object"},
      {"missing dtype", st_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", "12345678"),
       "tensor \"a\" has no \"dtype\""},
      {"missing shape", st_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", "12345678"),
       "tensor \"a\" has no \"shape\""},
      {"missing offsets", st_file(R"({"a":{"dtype":"F32","shape":[2]}})", "12345678"),
       "tensor \"a\" has no \"data_offsets\""},
      {"F64", st_file(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", "12345678"),
       "tensor \"a\": dtype F64 is valid safetensors but keel does not support it (supported: "
       "F32, BF16, I32, I64, BOOL)"},
      {"unknown dtype",
       st_file(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,8]}})", "12345678"),
       "tensor \"a\": unknown dtype \"Q7\""},
      {"negative dim", st_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "x"),
       "shape [-2] is not a list of non-negative integers"},
      {"offsets not a pair",
       st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", "12345678"),
       "data_offsets [8] is not [begin, end]"},
      {"shape and offsets disagree",
       st_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678"),
       "tensor \"a\": data_offsets [0,8] hold 8 bytes but shape [3] of F32 needs 12"},
      {"gap",
       st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
               std::string(12, 'x')),
       "gap in the data block: bytes [4,8)"},
      {"gap at the start",
       st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "12345678"),
       "gap in the data block: bytes [0,4)"},
      {"overlap",
       st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               std::string(12, 'x')),
       "tensors \"a\" [0,8] and \"b\" [4,12] overlap"},
      {"trailing bytes", st_file(good_header, std::string(12, 'x')),
       "4 trailing bytes after the last tensor: the header covers 8 bytes, the data block is 12"},
      {"metadata not strings", st_file(R"({"__metadata__":{"format":1}})", ""),
       "__metadata__ \"format\" is number, expected a string"},
  };
  for (const Corruption& c : cases) {
    const std::string path = dir / "bad.safetensors";
    write(path, c.bytes);
    const std::string msg = input_error_of([&] { read_safetensors(path); });
    EXPECT_EQ(msg.rfind("[safetensors] " + path + ": ", 0), 0u) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.what << ": " << msg;
  }
  write(dir / "ok.safetensors", good);  // the base of the cases is itself valid
  EXPECT_EQ(read_safetensors(dir / "ok.safetensors").tensors.at("a").shape(), Shape{2});
  EXPECT_NE(input_error_of([&] { read_safetensors(dir / "nope"); }).find("no such file"),
            std::string::npos);
}

// ---------------------------------------------------------------- checkpoints

CheckpointData make_data(int64_t step, int64_t size = 12) {
  CheckpointData d;
  d.step = step;
  const float s = static_cast<float>(step);
  d.model = {{"wte.weight", f32({size / 3, 3}, s)}, {"h.0.ln_1.bias", bf16({3}, s)}};
  d.optimizer = {{"wte.weight.exp_avg", f32({size / 3, 3}, -s)},
                 {"wte.weight.exp_avg_sq", f32({size / 3, 3}, 2 * s)},
                 {"h.0.ln_1.bias.exp_avg", bf16({3}, 0)},
                 {"h.0.ln_1.bias.exp_avg_sq", bf16({3}, 1)}};
  d.trainer = json({{"step", step}, {"cursor", step * 64}, {"config", {{"lr", 3e-4}}}}).dump();
  return d;
}

void expect_same(const CheckpointData& a, const CheckpointData& b) {
  EXPECT_EQ(a.step, b.step);
  expect_same(a.model, b.model);
  expect_same(a.optimizer, b.optimizer);
  EXPECT_EQ(a.trainer, b.trainer);
}

std::vector<std::string> steps_of(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (const auto& d : dirs) out.push_back(fs::path(d).filename().string());
  return out;
}

TEST(Checkpoint, WriteReadRoundTrip) {
  TempDir run;
  const CheckpointData d = make_data(7);
  const std::string dir = write_checkpoint(run.str(), d, 3);
  EXPECT_EQ(dir, run / "checkpoints/step-7");
  EXPECT_EQ(names_in(dir),
            (std::set<std::string>{"model.safetensors", "optimizer.safetensors", "trainer.json"}));
  EXPECT_EQ(names_in(run / "checkpoints"), std::set<std::string>{"step-7"});  // no temporaries
  expect_same(d, read_checkpoint(dir));
  expect_same(d, read_checkpoint(dir + "/"));
  EXPECT_EQ(read_safetensors(dir + "/model.safetensors").metadata.at("format"), "pt");
  EXPECT_EQ(latest_checkpoint(run.str()), dir);
  EXPECT_EQ(list_checkpoints(run.str()), std::vector<std::string>{dir});
}

// A checkpoint from a newer keel is refused in one line saying which format it is and what
// reads it; one without "format" is from before formats were numbered, and reads.
TEST(Checkpoint, ANewerFormatIsRefusedNamingTheVersionNeeded) {
  TempDir run;
  const std::string dir = write_checkpoint(run.str(), make_data(7), 3);
  auto with_trainer = [&](const std::string& text) {
    files::publish_file(dir + "/trainer.json", text);
    try {
      read_checkpoint(dir);
      return std::string("read");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(with_trainer(R"({"format": 1, "step": 7})"), "read");
  EXPECT_EQ(with_trainer(R"({"step": 7})"), "read");
  EXPECT_EQ(with_trainer(R"({"format": 2, "step": 7})"),
            fmt::format("[checkpoint] {}/trainer.json: field \"format\" is format 2, written by a "
                        "newer keel; this keel ({}) reads format 1 and older: open it with a keel "
                        "release that reads format 2",
                        dir, kVersion));
  EXPECT_NE(with_trainer(R"({"format": "1", "step": 7})").find("\"format\" is not an integer"),
            std::string::npos);
}

TEST(Checkpoint, NoCheckpointsYet) {
  TempDir run;
  EXPECT_EQ(latest_checkpoint(run.str()), std::nullopt);
  EXPECT_TRUE(list_checkpoints(run / "does-not-exist").empty());
}

TEST(Checkpoint, LatestIsTheNumericallyNewest) {
  TempDir run;
  for (int64_t s : {9, 10, 2}) write_checkpoint(run.str(), make_data(s), 10);
  EXPECT_EQ(steps_of(list_checkpoints(run.str())),
            (std::vector<std::string>{"step-2", "step-9", "step-10"}));
  EXPECT_EQ(latest_checkpoint(run.str()), run / "checkpoints/step-10");
}

TEST(Checkpoint, IncompleteAndTemporaryDirectoriesAreIgnored) {
  TempDir run;
  write_checkpoint(run.str(), make_data(5), 10);
  const std::string full = run / "checkpoints/step-5";
  auto copy_as = [&](const std::string& name, bool with_optimizer) {
    fs::create_directory(run / ("checkpoints/" + name));
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer.json"}) {
      if (!with_optimizer && std::string(f) == "optimizer.safetensors") continue;
      fs::copy_file(full + "/" + f, run / ("checkpoints/" + name + "/" + f));
    }
  };
  copy_as("step-6", false);               // missing optimizer.safetensors
  copy_as(".tmp-step-7-123-abcd", true);  // a writer's temporary
  copy_as("step-08", true);               // not a canonical step-N
  copy_as("step-x", true);
  fs::create_directory_symlink(full, run / "checkpoints/step-9");  // never follow links
  EXPECT_EQ(latest_checkpoint(run.str()), full);
  EXPECT_EQ(list_checkpoints(run.str()), std::vector<std::string>{full});
}

TEST(Checkpoint, KeepTwoKeepsExactlyTheNewestTwo) {
  TempDir run;
  for (int64_t s = 1; s <= 5; ++s) write_checkpoint(run.str(), make_data(s * 5), 2);
  EXPECT_EQ(names_in(run / "checkpoints"), (std::set<std::string>{"step-20", "step-25"}));
  expect_same(make_data(20), read_checkpoint(run / "checkpoints/step-20"));
  // keep=1 after an older step was written: the one just written always stays.
  write_checkpoint(run.str(), make_data(3), 1);
  EXPECT_EQ(names_in(run / "checkpoints"), (std::set<std::string>{"step-3", "step-25"}));
}

TEST(Checkpoint, ReplacingAnExistingStep) {
  TempDir run;
  write_checkpoint(run.str(), make_data(3, 6), 2);
  const CheckpointData b = make_data(3, 9);
  EXPECT_EQ(write_checkpoint(run.str(), b, 2), run / "checkpoints/step-3");
  expect_same(b, read_checkpoint(run / "checkpoints/step-3"));
  EXPECT_EQ(names_in(run / "checkpoints"), std::set<std::string>{"step-3"});
}

TEST(Checkpoint, ReadErrorsNameTheFile) {
  TempDir run;
  const std::string dir = write_checkpoint(run.str(), make_data(7), 3);
  const std::string trainer = dir + "/trainer.json";
  auto err = [&] { return input_error_of([&] { read_checkpoint(dir); }); };

  write(trainer, R"({"cursor": 1})");
  EXPECT_EQ(err(), "[checkpoint] " + trainer + ": has no integer \"step\"");
  write(trainer, R"({"step": "7"})");
  EXPECT_EQ(err(), "[checkpoint] " + trainer + ": has no integer \"step\"");
  write(trainer, "step=7");
  EXPECT_EQ(err().rfind("[checkpoint] " + trainer + ": not JSON", 0), 0u) << err();
  write(trainer, R"({"step": 8})");
  EXPECT_EQ(err(), "[checkpoint] " + trainer + ": \"step\" is 8 but the directory is step-7");
  write(trainer, R"({"step": 7})");
  EXPECT_EQ(read_checkpoint(dir).step, 7);

  const std::string model = dir + "/model.safetensors";
  const std::string bytes = slurp(model);
  write(model, bytes.substr(0, bytes.size() - 1));
  EXPECT_EQ(err().rfind("[safetensors] " + model + ": ", 0), 0u) << err();
  fs::remove(model);
  EXPECT_EQ(err().rfind("[checkpoint] " + model + ": missing", 0), 0u) << err();

  fs::create_directory(run / "checkpoints/latest");
  EXPECT_EQ(input_error_of([&] { read_checkpoint(run / "checkpoints/latest"); }),
            "[checkpoint] " + (run / "checkpoints/latest") + ": directory name is not step-N");
}

// Weights or moments that are not finite never recover: such a checkpoint is refused wherever
// it is read, naming the file, the tensor and the element.
TEST(Checkpoint, NonFiniteValuesAreRefusedNamingTheTensor) {
  TempDir run;
  CheckpointData nan = make_data(3);
  nan.model.at("wte.weight").set_f64(5, std::nan(""));
  const std::string dir = write_checkpoint(run.str(), nan, 3);
  EXPECT_EQ(input_error_of([&] { read_checkpoint(dir); }),
            "[checkpoint] " + dir +
                "/model.safetensors: tensor \"wte.weight\" holds NaN (element 5 of 12): the run "
                "that wrote it had diverged (keel train stops before writing one unless "
                "--on-nonfinite continue); the run keeps no earlier checkpoint");
  // The message names the newest checkpoint before it, which --resume would not pick.
  CheckpointData inf = make_data(4);
  inf.optimizer.at("h.0.ln_1.bias.exp_avg_sq").set_f64(2, -INFINITY);
  const std::string bf16_dir = write_checkpoint(run.str(), inf, 3);
  EXPECT_EQ(input_error_of([&] { read_checkpoint(bf16_dir); }),
            "[checkpoint] " + bf16_dir +
                "/optimizer.safetensors: tensor \"h.0.ln_1.bias.exp_avg_sq\" holds -inf (element "
                "2 of 3): the run that wrote it had diverged (keel train stops before writing one "
                "unless --on-nonfinite continue); its newest earlier checkpoint is " +
                dir +
                ": give it to keel sample or eval --checkpoint, or move step-4 aside for "
                "--resume to continue from it");
  CheckpointData big = make_data(5);
  big.model.at("wte.weight").set_f64(0, 3e38);  // large and finite
  EXPECT_EQ(read_checkpoint(write_checkpoint(run.str(), big, 3)).step, 5);
}

// trainer.json as resume and keel sample read it: what keel writes reads back typed, and each
// missing or mistyped field is one line naming the file and the field, never a raw JSON
// exception.
TEST(TrainerJson, EveryFieldIsCheckedAndNamed) {
  const std::string source = "run/checkpoints/step-2/trainer.json";
  const nn::GptConfig config = nn::gpt_preset("code-s");  // batch 16
  const json good = {{"step", 2},
                     {"cursor", {{"row", 2 * 3 * 16}}},
                     {"config", json::parse(config.to_json())},
                     {"accum", 3},
                     {"seed", 5},
                     {"options", {{"steps", 9}}},
                     {"bundle", {{"os", "Linux"}}},
                     {"policy", json::object()}};
  const TrainerJson s = read_trainer_json(good.dump(), source);
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(s.cursor.row, 96);
  EXPECT_EQ(s.config.to_json(), config.to_json());
  EXPECT_EQ(s.accum, 3);
  EXPECT_EQ(s.seed, 5u);
  ASSERT_TRUE(s.bundle.has_value());
  EXPECT_EQ(s.bundle->fields.at("os"), "Linux");

  auto with = [&](const std::string& field, const json& value) {
    json j = good;
    if (value.is_discarded()) {
      j.erase(field);
    } else {
      j[field] = value;
    }
    return input_error_of([&] { read_trainer_json(j.dump(), source); });
  };
  const json missing = json::value_t::discarded;
  const std::string at = "[checkpoint] " + source + ": field ";
  EXPECT_EQ(with("accum", "x"), at + "\"accum\" must be an integer >= 1, found \"x\"");
  EXPECT_EQ(with("accum", 0), at + "\"accum\" must be an integer >= 1, found 0");
  EXPECT_EQ(with("step", -1), at + "\"step\" must be an integer >= 0, found -1");
  EXPECT_EQ(with("step", 18446744073709551615u),
            at + "\"step\" must be an integer >= 0, found 18446744073709551615");
  EXPECT_EQ(with("seed", 1.5), at + "\"seed\" must be an integer >= 0, found 1.5");
  EXPECT_EQ(with("config", 7), at + "\"config\" must be an object, found 7");
  EXPECT_EQ(with("cursor", "x"), at + "\"cursor\" must be an object, found \"x\"");
  EXPECT_EQ(with("bundle", json::array({1})), at + "\"bundle\" must be an object, found [1]");
  for (const char* field : {"step", "cursor", "config", "accum", "seed"}) {
    EXPECT_EQ(with(field, missing),
              at + "\"" + field +
                  "\" is missing (keel writes step, cursor, config, accum and seed); the "
                  "checkpoint is damaged or was not written by keel train");
  }
  EXPECT_EQ(with("bundle", missing), "<no error>");  // hand-made checkpoints have none
  // The nested objects are checked by their own readers, still naming the file and field.
  EXPECT_EQ(with("config", {{"name", "code-s"}, {"vocab", 100}}),
            "[nn] " + source +
                " field \"config\": field 'vocab' must be at least 256 (an embedding row for "
                "every token the data holds), got 100");
  EXPECT_EQ(with("cursor", {{"row", -1}}),
            "[data] " + source +
                " field \"cursor\": cursor field \"row\" must be a non-negative integer, got -1");
  // A cursor is exactly what step x accum x batch rows read: a huge row is refused, not walked.
  EXPECT_EQ(with("cursor", {{"row", INT64_MAX}}),
            at + "\"cursor\" row 9223372036854775807 is not the 96 rows that step 2 x accum 3 x "
                 "batch 16 read; the cursor and the step disagree (the checkpoint is damaged or "
                 "was edited)");
  EXPECT_EQ(with("step", INT64_MAX),
            at + "\"cursor\" row 96 is not the more than int64 rows that step "
                 "9223372036854775807 x accum 3 x batch 16 read; the cursor and the step "
                 "disagree (the checkpoint is damaged or was edited)");
  EXPECT_EQ(input_error_of([&] { read_trainer_json("[1, 2]", source); }),
            "[checkpoint] " + source + ": must be a JSON object, found [1,2]");
  EXPECT_EQ(input_error_of([&] {
              read_trainer_json("{\"step\": 2", source);
            }).rfind("[checkpoint] " + source + ": not JSON (parse error at byte", 0),
            0u);
}

TEST(Checkpoint, WriteRefusesWhatCouldNotBeReadBack) {
  TempDir run;
  CheckpointData d = make_data(4);
  d.trainer = R"({"step": 3})";
  EXPECT_THROW(write_checkpoint(run.str(), d, 1), Error);
  d.trainer = "{}";
  EXPECT_THROW(write_checkpoint(run.str(), d, 1), Error);
  EXPECT_NE(input_error_of([&] {
              write_checkpoint(run.str(), make_data(4), 0);
            }).find("keep is 0, expected >= 1"),
            std::string::npos);
  EXPECT_EQ(latest_checkpoint(run.str()), std::nullopt);
}

// A writer that fails halfway (after model.safetensors) leaves the previous checkpoint intact.
TEST(Checkpoint, FailedWriteKeepsThePreviousCheckpoint) {
  TempDir run;
  write_checkpoint(run.str(), make_data(1), 1);
  CheckpointData bad = make_data(2);
  bad.optimizer["__metadata__"] = f32({1}, 0);  // write_safetensors refuses this name
  EXPECT_THROW(write_checkpoint(run.str(), bad, 1), Error);
  EXPECT_EQ(names_in(run / "checkpoints"), std::set<std::string>{"step-1"});
  EXPECT_EQ(latest_checkpoint(run.str()), run / "checkpoints/step-1");
  expect_same(make_data(1), read_checkpoint(run / "checkpoints/step-1"));
}

TEST(Checkpoint, StaleTemporariesOlderThanTheNewestAreRemoved) {
  TempDir run;
  write_checkpoint(run.str(), make_data(1), 3);
  const auto now = fs::file_time_type::clock::now();
  for (const char* name : {".tmp-step-2-99-dead", ".old-step-1-99-dead", ".tmp-step-3-98-new"}) {
    const std::string d = run / ("checkpoints/" + std::string(name));
    fs::create_directory(d);
    write(d + "/model.safetensors", "partial");
  }
  fs::last_write_time(run / "checkpoints/.tmp-step-2-99-dead", now - std::chrono::hours(1));
  fs::last_write_time(run / "checkpoints/.old-step-1-99-dead", now - std::chrono::hours(1));
  fs::last_write_time(run / "checkpoints/.tmp-step-3-98-new", now + std::chrono::hours(1));
  write_checkpoint(run.str(), make_data(4), 3);
  EXPECT_EQ(names_in(run / "checkpoints"),
            (std::set<std::string>{"step-1", "step-4", ".tmp-step-3-98-new"}));
}

// A writer SIGKILLed at random moments never leaves a torn step-N, and the newest complete
// checkpoint always reads back as exactly what was written for that step.
TEST(Checkpoint, KilledWriterNeverTearsACheckpoint) {
  TempDir run;
  write_checkpoint(run.str(), make_data(1, 30000), 2);
  std::mt19937 rng(1234);
  int64_t seen_max = 1;
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t first = 100 * (trial + 1);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t s = first; s < first + 100; ++s) {
        try {
          write_checkpoint(run.str(), make_data(s, 30000), 2);
        } catch (...) {
          ::_exit(3);
        }
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<>(100, 20000)(rng)));
    ::kill(pid, SIGKILL);
    const int status = reap_child(pid);
    ASSERT_GE(status, 0);
    ASSERT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "the writer failed";
    const auto latest = latest_checkpoint(run.str());
    ASSERT_TRUE(latest.has_value()) << "trial " << trial;
    for (const std::string& dir : list_checkpoints(run.str())) {
      const CheckpointData d = read_checkpoint(dir);
      expect_same(make_data(d.step, 30000), d);
    }
    const int64_t step = read_checkpoint(*latest).step;
    EXPECT_GE(step, seen_max) << "trial " << trial;  // never goes back
    seen_max = step;
  }
  // The next ordinary write clears what the killed writers left behind.
  write_checkpoint(run.str(), make_data(5000), 2);
  for (const std::string& name : names_in(run / "checkpoints")) {
    EXPECT_EQ(name.rfind("step-", 0), 0u) << name;
  }
  EXPECT_EQ(list_checkpoints(run.str()).size(), 2u);
}

// Reads done by the parent, in memory shared with a forked writer, so the writer can pace
// itself: the test needs reads between writes however the two processes are scheduled.
class SharedCounter {
 public:
  SharedCounter()
      : at_(static_cast<std::atomic<int64_t>*>(::mmap(nullptr, sizeof(std::atomic<int64_t>),
                                                      PROT_READ | PROT_WRITE,
                                                      MAP_SHARED | MAP_ANONYMOUS, -1, 0))) {
    if (at_ == MAP_FAILED) throw std::runtime_error("mmap failed");
    new (at_) std::atomic<int64_t>(0);
  }
  ~SharedCounter() { ::munmap(at_, sizeof(std::atomic<int64_t>)); }
  SharedCounter(const SharedCounter&) = delete;
  SharedCounter& operator=(const SharedCounter&) = delete;
  void add() { at_->fetch_add(1); }
  int64_t get() const { return at_->load(); }
  // Waits up to 30 s for the count to reach n; false when it did not (a stopped reader).
  bool wait_for(int64_t n) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (get() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return get() >= n;
  }

 private:
  std::atomic<int64_t>* at_;
};

// A process saving a checkpoint every step (keep 1: each save retires the one before) while this
// one reads the newest, again and again: every read is a whole checkpoint of one step, the step
// never goes back, and a checkpoint retired between choosing and reading it is passed over, never
// an error.
TEST(Checkpoint, TheNewestReadsWholeWhileAnotherProcessWrites) {
  TempDir run;
  constexpr int64_t kSize = 600000, kSteps = 60;  // large enough that a read takes a while
  write_checkpoint(run.str(), make_data(1, kSize), 1);
  SharedCounter reads;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    bool paced = true;  // at least 20 reads in all, interleaved with the writes
    for (int64_t s = 2; s <= kSteps; ++s) {
      paced = paced && reads.wait_for(s / 3);  // a reader that stopped is waited for once
      try {
        write_checkpoint(run.str(), make_data(s, kSize), 1);
      } catch (...) {
        ::_exit(3);
      }
    }
    ::_exit(0);
  }
  int64_t last = 1;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    std::optional<FoundCheckpoint> found = read_latest_checkpoint(run.str());
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(fs::path(found->dir).filename().string(), "step-" + std::to_string(found->data.step));
    expect_same(make_data(found->data.step, kSize), found->data);
    EXPECT_GE(found->data.step, last);
    last = found->data.step;
    reads.add();
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the writer failed";
  EXPECT_GE(reads.get(), kSteps / 3);
  EXPECT_EQ(read_checkpoint_or_newest(run.str()).data.step, kSteps);
  RecordProperty("concurrent_reads", std::to_string(reads.get()));
}

// A listing taken while step-N+1 is published and step-N retired can miss both names; the
// newest must still be found, never "no checkpoint" (which would start a resume from scratch).
TEST(Checkpoint, ListingWhileAnotherProcessPublishesAlwaysFindsOne) {
  TempDir run;
  constexpr int64_t kSteps = 400;
  write_checkpoint(run.str(), make_data(1), 1);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    for (int64_t s = 2; s <= kSteps; ++s) {
      try {
        write_checkpoint(run.str(), make_data(s), 1);
      } catch (...) {
        ::_exit(3);
      }
    }
    ::_exit(0);
  }
  int64_t listings = 0, empty = 0;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (!latest_checkpoint(run.str())) ++empty;
    ++listings;
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the writer failed";
  EXPECT_EQ(empty, 0) << "of " << listings << " listings";
  RecordProperty("listings", std::to_string(listings));
}

TEST(CopyInto, ReplacesEveryValue) {
  TensorMap into = {{"a", Array(DType::f32, {2, 3})}, {"b", Array(DType::bf16, {4})}};
  const TensorMap from = {{"a", f32({2, 3}, 1)}, {"b", bf16({4}, 2)}};
  copy_into(into, from, "ckpt");
  expect_same(from, into);
}

TEST(CopyInto, ListsEveryMismatchInOneError) {
  TensorMap into = {{"h.0.attn.c_attn.weight", Array(DType::f32, {384, 768})},
                    {"wpe.weight", Array(DType::f32, {4, 2})}};
  const TensorMap from = {{"h.0.attn.c_attn.weight", Array(DType::f32, {384, 1152})}};
  EXPECT_EQ(input_error_of([&] { copy_into(into, from, "run/checkpoints/step-5"); }),
            "[checkpoint] run/checkpoints/step-5: 2 tensors do not match this model: "
            "h.0.attn.c_attn.weight shape [384,1152] in the checkpoint, [384,768] here; "
            "wpe.weight missing from the checkpoint");

  TensorMap into2 = {{"c", f32({2}, 0)},
                     {"b", f32({2}, 0)},
                     {"a", f32({2}, 0)},
                     {"d", f32({1}, 0)},
                     {"ok", f32({1}, 0)}};
  const TensorMap from2 = {{"a", bf16({2}, 1)},
                           {"b", ints({3}, DType::i32, 0)},
                           {"c", f32({2}, 9)},
                           {"e", f32({1}, 0)},
                           {"ok", f32({1}, 5)}};
  EXPECT_EQ(input_error_of([&] { copy_into(into2, from2, "x"); }),
            "[checkpoint] x: 4 tensors do not match this model: a dtype bf16 in the checkpoint, "
            "f32 here; b i32[3] in the checkpoint, f32[2] here; d missing from the checkpoint; "
            "e in the checkpoint but not in this model");
  EXPECT_EQ(into2.at("c").get_f64(0), 0.0);  // nothing is copied when anything mismatches
  EXPECT_EQ(into2.at("ok").get_f64(0), 0.0);

  TensorMap one = {{"a", f32({2}, 0)}};
  EXPECT_EQ(input_error_of([&] { copy_into(one, {}, "y"); }),
            "[checkpoint] y: 1 tensor does not match this model: a missing from the checkpoint");
}

}  // namespace
}  // namespace keel::train

// ---------------------------------------------------------------- TensorBoard

namespace keel::diag {
namespace {

using keel::train::input_error_of;
using keel::train::slurp;
using keel::train::TempDir;
using keel::train::u64_le;

uint32_t u32_at(const std::string& s, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

uint64_t u64_at(const std::string& s, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}

// Record framing written here from the format description, for hand-made payloads.
std::string record(const std::string& payload) {
  std::string len = u64_le(payload.size());
  auto le32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  return len + le32(masked_crc32c(len)) + payload + le32(masked_crc32c(payload));
}

// Start offsets of every record of a well-formed file.
std::vector<size_t> record_starts(const std::string& bytes) {
  std::vector<size_t> out;
  for (size_t at = 0; at + 16 <= bytes.size(); at += 16 + u64_at(bytes, at)) out.push_back(at);
  return out;
}

class TensorBoardEvents : public ::testing::Test {
 protected:
  // Three scalars after the version record; their record offsets in starts_.
  void write_three() {
    EventWriter w(dir_.str());
    for (int i = 0; i < 3; ++i) w.add_scalar("loss", i, 1.0f / static_cast<float>(i + 1), 9.0);
    path_ = w.path();
    w.flush();
    bytes_ = slurp(path_);
    starts_ = record_starts(bytes_);
    ASSERT_EQ(starts_.size(), 4u);
  }
  std::string error_with(const std::string& bytes) {
    keel::train::write(path_, bytes);
    return input_error_of([&] { read_scalar_events(path_); });
  }
  std::string prefix(size_t at) const {
    return "[tensorboard] " + path_ + ": record at byte " + std::to_string(at) + ": ";
  }
  TempDir dir_;
  std::string path_, bytes_;
  std::vector<size_t> starts_;
};

TEST_F(TensorBoardEvents, Crc32cTestVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(masked_crc32c(u64_le(24)), 0x224b7fa3u);
}

TEST_F(TensorBoardEvents, ScalarsRoundTripExactly) {
  TempDir dir;
  std::string path;
  {
    EventWriter w(dir / "tb");
    w.add_scalar("train/loss", 1, 2.5f, 1700000000.25);
    w.add_scalar("train/loss", int64_t{1} << 40, 1.1f, 1700000001.5);
    w.add_scalar("lr", -3, 3e-4f, 1700000002.0);
    w.flush();
    path = w.path();
    EXPECT_EQ(read_scalar_events(path).size(), 3u);  // readable while open, after flush
  }
  const auto ev = read_scalar_events(path);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].tag, "train/loss");
  EXPECT_EQ(ev[0].step, 1);
  EXPECT_EQ(ev[0].value, 2.5f);
  EXPECT_EQ(ev[0].wall_time, 1700000000.25);
  EXPECT_EQ(ev[1].step, int64_t{1} << 40);
  EXPECT_EQ(ev[1].value, 1.1f);
  EXPECT_EQ(ev[2].tag, "lr");
  EXPECT_EQ(ev[2].step, -3);
  EXPECT_EQ(ev[2].value, 3e-4f);
  EXPECT_EQ(ev[2].wall_time, 1700000002.0);
}

TEST_F(TensorBoardEvents, FirstRecordIsTheVersionRecord) {
  TempDir dir;
  std::string path;
  {
    EventWriter w(dir.str());
    w.add_scalar("a", 7, 1.0f, 5.0);
    path = w.path();
  }
  const std::string bytes = slurp(path);
  const auto starts = record_starts(bytes);
  ASSERT_EQ(starts.size(), 2u);
  const size_t len = u64_at(bytes, 0);
  EXPECT_EQ(u32_at(bytes, 8), masked_crc32c(bytes.substr(0, 8)));
  const std::string payload = bytes.substr(12, len);
  EXPECT_EQ(u32_at(bytes, 12 + len), masked_crc32c(payload));
  // wall_time (tag 0x09, 8 bytes), then file_version (tag 0x1a) "brain.Event:2".
  ASSERT_EQ(payload.size(), 1 + 8 + 2 + 13u);
  EXPECT_EQ(payload[0], '\x09');
  EXPECT_EQ(payload.substr(9), std::string("\x1a\x0d") + "brain.Event:2");
  // The scalar: wall_time, step (0x10) 7, summary (0x2a){value (0x0a){tag, simple_value}}.
  const std::string s = bytes.substr(starts[1] + 12, u64_at(bytes, starts[1]));
  const float one = 1.0f;
  const std::string value = std::string(
                                "\x0a\x01"
                                "a"
                                "\x15",
                                4) +
                            std::string(reinterpret_cast<const char*>(&one), 4);
  EXPECT_EQ(s.substr(9), std::string("\x10\x07\x2a\x0a\x0a\x08", 6) + value);
  EXPECT_EQ(u32_at(bytes, bytes.size() - 4), masked_crc32c(s));
}

TEST_F(TensorBoardEvents, FileNameFollowsTheConvention) {
  TempDir dir;
  EventWriter a(dir.str());
  EventWriter b(dir.str());  // same second, same process: a different file
  const std::regex name(R"(events\.out\.tfevents\.(\d{10})\.[A-Za-z0-9._-]+\.)" +
                        std::to_string(::getpid()) + R"(\.(\d+))");
  std::smatch ma, mb;
  const std::string na = std::filesystem::path(a.path()).filename().string();
  const std::string nb = std::filesystem::path(b.path()).filename().string();
  ASSERT_TRUE(std::regex_match(na, ma, name)) << na;
  ASSERT_TRUE(std::regex_match(nb, mb, name)) << nb;
  EXPECT_NE(ma[2].str(), mb[2].str());
  EXPECT_LE(std::abs(std::stoll(ma[1].str()) - static_cast<long long>(std::time(nullptr))), 5);
  EXPECT_EQ(std::filesystem::path(a.path()).parent_path(), std::filesystem::path(dir.str()));
}

TEST_F(TensorBoardEvents, FlippedPayloadByteNamesTheRecord) {
  ASSERT_NO_FATAL_FAILURE(write_three());
  std::string b = bytes_;
  b[starts_[2] + 12 + 5] ^= 0x20;
  EXPECT_EQ(error_with(b).rfind(prefix(starts_[2]) + "payload CRC mismatch", 0), 0u)
      << error_with(b);
}

TEST_F(TensorBoardEvents, FlippedLengthByteNamesTheRecord) {
  ASSERT_NO_FATAL_FAILURE(write_three());
  std::string b = bytes_;
  b[starts_[1] + 1] ^= 0x01;
  EXPECT_EQ(error_with(b).rfind(prefix(starts_[1]) + "length CRC mismatch", 0), 0u)
      << error_with(b);
  b = bytes_;
  b[bytes_.size() - 1] ^= 0x80;  // the last payload CRC itself
  EXPECT_EQ(error_with(b).rfind(prefix(starts_[3]) + "payload CRC mismatch", 0), 0u)
      << error_with(b);
}

TEST_F(TensorBoardEvents, TruncatedFileNamesTheRecord) {
  ASSERT_NO_FATAL_FAILURE(write_three());
  const std::string cut_payload = error_with(bytes_.substr(0, bytes_.size() - 3));
  EXPECT_EQ(cut_payload.rfind(prefix(starts_[3]) + "truncated", 0), 0u) << cut_payload;
  const std::string cut_header = error_with(bytes_.substr(0, starts_[3] + 5));
  EXPECT_EQ(cut_header.rfind(prefix(starts_[3]) + "truncated", 0), 0u) << cut_header;
  keel::train::write(path_, bytes_.substr(0, starts_[3]));  // whole records are a valid file
  EXPECT_EQ(read_scalar_events(path_).size(), 2u);
}

TEST_F(TensorBoardEvents, UnknownFieldsAreSkippedAndBadProtobufIsReported) {
  ASSERT_NO_FATAL_FAILURE(write_three());
  // Unknown fields of every wire type around a scalar, as newer writers may add.
  std::string value = std::string("\x0a\x01x\x15", 4) + std::string("\x00\x00\x80\x3f", 4);
  std::string summary =
      std::string("\x0a") + char(value.size()) + value + std::string("\x12\x00", 2);
  std::string e = std::string("\x38\x96\x01", 3) + "\x41" + std::string(8, '\0') + "\x4a\x02zz" +
                  "\x55" + std::string(4, '\1') + "\x10\x05" + "\x2a" + char(summary.size()) +
                  summary;
  keel::train::write(path_, record(e));
  const auto ev = read_scalar_events(path_);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].tag, "x");
  EXPECT_EQ(ev[0].step, 5);
  EXPECT_EQ(ev[0].value, 1.0f);

  const std::string good = record(e);
  EXPECT_EQ(error_with(good + record("\x2a\x05\x0a\x09"))
                .rfind(prefix(good.size()) + "malformed Event", 0),
            0u);
  EXPECT_EQ(error_with(good + record("\x0b")).rfind(prefix(good.size()) + "malformed Event", 0),
            0u);
}

}  // namespace
}  // namespace keel::diag
