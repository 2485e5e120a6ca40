// Checkpoint directories: built under .tmp-step-N-<pid>-<random>, published by rename, pruned
// by rename-aside-then-remove so a crash at any moment leaves every visible step-N complete.
#include "train/checkpoint.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <variant>

#include "files/errno_text.h"
#include "files/publish.h"
#include "files/read.h"
#include "ir/error.h"
#include "ir/version.h"

namespace keel::train {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFiles[] = {"model.safetensors", "optimizer.safetensors", "trainer.json"};
constexpr int64_t kMaxTrainerJsonBytes = 64 << 20;  // step, cursor, config, bundle, policy

// The first NaN or infinity of a float tensor, by element; nullopt when every value is finite.
std::optional<int64_t> first_nonfinite(const Array& a) {
  const int64_t n = a.numel();
  if (a.dtype() == DType::f32) {
    const auto* bits = static_cast<const uint32_t*>(static_cast<const void*>(a.data()));
    for (int64_t i = 0; i < n; ++i) {
      if ((bits[i] & 0x7f800000u) == 0x7f800000u) return i;
    }
  } else if (a.dtype() == DType::bf16) {
    const auto* bits = static_cast<const uint16_t*>(static_cast<const void*>(a.data()));
    for (int64_t i = 0; i < n; ++i) {
      if ((bits[i] & 0x7f80u) == 0x7f80u) return i;
    }
  }
  return std::nullopt;
}

// Weights or moments that are not finite never recover (AdamW carries a NaN forward), so such a
// checkpoint is refused wherever it is read, naming the tensor.
void check_finite(const TensorMap& tensors, const fs::path& file) {
  for (const auto& [name, a] : tensors) {
    if (const std::optional<int64_t> at = first_nonfinite(a)) {
      const double v = a.get_f64(*at);
      throw InputError(fmt::format(
          "[checkpoint] {}: tensor \"{}\" holds {} (element {} of {}): the run that wrote it "
          "had diverged (keel train stops before writing one unless --on-nonfinite continue)",
          file.string(), name,
          std::isnan(v) ? "NaN"
          : v > 0       ? "+inf"
                        : "-inf",
          *at, a.numel()));
    }
  }
}

std::string unique_suffix() {
  return fmt::format("{}-{:08x}", ::getpid(), std::random_device{}());
}

// "step-N" with N in canonical decimal (no sign, no leading zero), so two names never share N.
std::optional<int64_t> step_of(std::string_view name) {
  if (!name.starts_with("step-")) return std::nullopt;
  std::string_view digits = name.substr(5);
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  int64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n < 0) return std::nullopt;
  return n;
}

bool is_complete(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return false;
  for (const char* f : kFiles) {
    if (!fs::is_regular_file(fs::symlink_status(dir / f, ec))) return false;
  }
  return true;
}

struct Found {
  int64_t step;
  fs::path path;
};

// Complete step-N directories, oldest (smallest N) first.
std::vector<Found> complete_checkpoints(const std::string& run_dir) {
  std::vector<Found> out;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    auto step = step_of(it->path().filename().string());
    if (step && is_complete(it->path())) out.push_back({*step, it->path()});
  }
  // No directory means no checkpoints; an unreadable one must not look like a fresh run.
  if (ec && ec != std::errc::no_such_file_or_directory) {
    throw Error(fmt::format("[checkpoint] cannot list {}: {}", root.string(), ec.message()));
  }
  std::sort(out.begin(), out.end(), [](const Found& a, const Found& b) { return a.step < b.step; });
  return out;
}

// The integer "step" of a trainer.json text, or a reason it has none.
std::variant<int64_t, std::string> trainer_step(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    return fmt::format("not JSON (parse error at byte {})", e.byte > 0 ? e.byte - 1 : 0);
  } catch (const json::out_of_range&) {  // a number beyond double, "1e400"
    return std::string("holds a number out of range");
  }
  if (j.is_object() && j.contains("format")) {  // absent before formats were numbered: 1
    if (!j["format"].is_number_integer()) return std::string("field \"format\" is not an integer");
    std::string problem =
        format_problem("format", j["format"].get<long long>(), Formats::checkpoint);
    if (!problem.empty()) return problem;
  }
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
    return std::string("has no integer \"step\"");
  }
  if (j["step"].is_number_unsigned() && j["step"].get<uint64_t>() > uint64_t(INT64_MAX)) {
    return std::string("\"step\" is out of range");
  }
  return j["step"].get<int64_t>();
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw Error(fmt::format("[checkpoint] cannot rename {} to {}: {}", from.string(), to.string(),
                            files::errno_text()));
  }
}

// Removal in two steps: the rename hides it at once, a crash mid-removal leaves only debris.
void retire(const fs::path& root, const fs::path& dir, int64_t step) {
  fs::path aside = root / fmt::format(".old-step-{}-{}", step, unique_suffix());
  rename_or_throw(dir, aside);
  std::error_code ec;
  fs::remove_all(aside, ec);  // best effort: what is left is removed as stale debris later
}

// .tmp-*/.old-* directories not newer than the checkpoint just published belong to writers that
// died (a run has one writer); removed best effort. "Not newer": a writer killed within the
// file system's timestamp tick of this publish leaves debris with the same time.
void remove_stale(const fs::path& root, const fs::path& published) {
  std::error_code ec;
  const auto newest = fs::last_write_time(published, ec);
  if (ec) return;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(".tmp-step-") && !name.starts_with(".old-step-")) continue;
    std::error_code e2;
    if (!fs::is_directory(fs::symlink_status(it->path(), e2))) continue;
    auto t = fs::last_write_time(it->path(), e2);
    if (!e2 && t <= newest) fs::remove_all(it->path(), e2);
  }
}

}  // namespace

namespace {

// Refuses data whose trainer.json would not read back as this step.
void check_trainer(const CheckpointData& data) {
  if (data.step < 0) throw Error(fmt::format("[checkpoint] step {} is negative", data.step));
  auto ts = trainer_step(data.trainer);
  if (const auto* why = std::get_if<std::string>(&ts)) {
    throw Error(fmt::format("[checkpoint] trainer.json for step {} {}", data.step, *why));
  }
  if (std::get<int64_t>(ts) != data.step) {
    throw Error(
        fmt::format("[checkpoint] trainer.json \"step\" is {} but the checkpoint is step {}",
                    std::get<int64_t>(ts), data.step));
  }
}

// Renames the finished `tmp` onto `final_dir`; an existing one is moved aside first and removed
// only once the new one is durable.
void publish(const fs::path& root, const fs::path& tmp, const fs::path& final_dir, int64_t step) {
  std::error_code ec;
  std::optional<fs::path> aside;
  if (fs::exists(fs::symlink_status(final_dir, ec))) {
    aside = root / fmt::format(".old-step-{}-{}", step, unique_suffix());
    rename_or_throw(final_dir, *aside);
  }
  try {
    rename_or_throw(tmp, final_dir);
  } catch (...) {
    if (aside) ::rename(aside->c_str(), final_dir.c_str());  // put the old one back
    throw;
  }
  files::fsync_directory(root.string());
  if (aside) fs::remove_all(*aside, ec);  // left over on failure: removed later as stale
}

}  // namespace

std::string write_checkpoint(const std::string& run_dir, const CheckpointData& data, int keep) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  if (keep < 1) {
    throw InputError(
        fmt::format("[checkpoint] {}: keep is {}, expected >= 1", root.string(), keep));
  }
  check_trainer(data);
  std::error_code ec;
  if (fs::create_directories(root, ec)) {
    files::fsync_directory(root.parent_path().empty() ? "." : root.parent_path().string());
  }
  if (ec) {
    throw Error(fmt::format("[checkpoint] cannot create {}: {}", root.string(), ec.message()));
  }
  const fs::path tmp = root / fmt::format(".tmp-step-{}-{}", data.step, unique_suffix());
  if (::mkdir(tmp.c_str(), 0755) != 0) {
    throw Error(
        fmt::format("[checkpoint] cannot create {}: {}", tmp.string(), files::errno_text()));
  }
  const fs::path final_dir = root / fmt::format("step-{}", data.step);
  try {
    if (data.model_tensor) {
      write_safetensors_streamed((tmp / kFiles[0]).string(), data.model_types, data.model_tensor,
                                 {{"format", "pt"}}, data.model_order);
    } else {
      write_safetensors((tmp / kFiles[0]).string(), data.model, {{"format", "pt"}});
    }
    if (data.optimizer_tensor) {
      write_safetensors_streamed((tmp / kFiles[1]).string(), data.optimizer_types,
                                 data.optimizer_tensor, {{"format", "pt"}}, data.optimizer_order);
    } else {
      write_safetensors((tmp / kFiles[1]).string(), data.optimizer, {{"format", "pt"}});
    }
    files::PublishOptions o;
    o.sync_directory = false;  // the whole directory is synced next
    files::publish_file((tmp / kFiles[2]).string(), data.trainer, o);
    files::fsync_directory(tmp.string());
    publish(root, tmp, final_dir, data.step);
  } catch (const InputError&) {
    fs::remove_all(tmp, ec);
    throw;
  } catch (const Error& e) {  // a full disk, an I/O error: say what is still safe
    fs::remove_all(tmp, ec);
    std::optional<std::string> previous;
    try {
      previous = latest_checkpoint(run_dir);
    } catch (const std::exception&) {
    }
    throw Error(fmt::format("[checkpoint] step {} was not saved ({}); {}", data.step, e.what(),
                            previous ? "the newest complete checkpoint is still " + *previous
                                     : "there is no earlier checkpoint"));
  }
  // Pruned only now that the new one is in place; the one just written always stays.
  const auto all = complete_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
    if (all[i].step != data.step) retire(root, all[i].path, all[i].step);
  }
  remove_stale(root, final_dir);
  files::fsync_directory(root.string());
  return final_dir.string();
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::string> out;
  for (const Found& f : complete_checkpoints(run_dir)) out.push_back(f.path.string());
  return out;
}

// A listing taken while another process publishes step-N+1 and retires step-N can miss both:
// readdir need not return entries renamed during the scan. So "no checkpoint" is believed only
// after several listings agree; a run without one lists empty every time.
std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  constexpr int kEmptyListings = 3;
  for (int listing = 0; listing < kEmptyListings; ++listing) {
    auto all = complete_checkpoints(run_dir);
    if (!all.empty()) return all.back().path.string();
  }
  return std::nullopt;
}

namespace {

// The newest checkpoint, `read` (read_checkpoint or open_checkpoint): one the writer retires
// between the choice and the read is passed over for the then-newest.
std::optional<FoundCheckpoint> newest_checkpoint(
    const std::string& run_dir, const std::function<CheckpointData(const std::string&)>& read) {
  for (int attempt = 1;; ++attempt) {
    std::optional<std::string> dir = latest_checkpoint(run_dir);
    if (!dir) return std::nullopt;
    try {
      return FoundCheckpoint{*dir, read(*dir)};
    } catch (const InputError&) {
      std::error_code ec;
      if (attempt < 100 && !fs::exists(*dir, ec)) continue;  // retired under us: choose again
      throw;
    }
  }
}

}  // namespace

std::optional<FoundCheckpoint> read_latest_checkpoint(const std::string& run_dir) {
  return newest_checkpoint(run_dir, read_checkpoint);
}

std::optional<FoundCheckpoint> open_latest_checkpoint(const std::string& run_dir) {
  return newest_checkpoint(run_dir, [](const std::string& dir) { return open_checkpoint(dir); });
}

namespace {

// A checkpoint or a run directory's newest one, `read` (read_checkpoint or open_checkpoint).
FoundCheckpoint checkpoint_or_newest(
    const std::string& path, const std::function<CheckpointData(const std::string&)>& read) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw InputError(fmt::format(
        "[checkpoint] {} does not exist; give a checkpoint (.../checkpoints/step-N) or a run "
        "directory that has saved one",
        path));
  }
  if (fs::exists(fs::path(path) / kFiles[2], ec) ||
      !fs::is_directory(fs::path(path) / "checkpoints", ec)) {
    return FoundCheckpoint{path, read(path)};
  }
  std::optional<FoundCheckpoint> found = newest_checkpoint(path, read);
  if (!found) {
    throw InputError(fmt::format(
        "[checkpoint] {} is a run directory with no complete checkpoint under checkpoints/; "
        "give a checkpoint (.../checkpoints/step-N) or a run that has saved one",
        path));
  }
  return std::move(*found);
}

}  // namespace

FoundCheckpoint read_checkpoint_or_newest(const std::string& path) {
  return checkpoint_or_newest(path, [](const std::string& dir) { return read_checkpoint(dir); });
}

FoundCheckpoint open_checkpoint_or_newest(const std::string& path) {
  return checkpoint_or_newest(path, [](const std::string& dir) { return open_checkpoint(dir); });
}

namespace {

// Where to go from a checkpoint that cannot be used: the newest complete one before it in the
// same run, which --resume and keel sample RUN_DIR would not pick on their own.
std::string earlier_checkpoint_advice(const fs::path& step_dir, int64_t step) {
  if (step_dir.parent_path().filename() != "checkpoints") return "";
  std::optional<Found> earlier;
  try {
    for (const Found& f : complete_checkpoints(step_dir.parent_path().parent_path().string())) {
      if (f.step < step) earlier = f;
    }
  } catch (const Error&) {
    return "";
  }
  if (!earlier) return "; the run keeps no earlier checkpoint";
  return fmt::format(
      "; its newest earlier checkpoint is {}: give it to keel sample or eval --checkpoint, or move "
      "step-{} aside for --resume to continue from it",
      earlier->path.string(), step);
}

}  // namespace

CheckpointData open_checkpoint(const std::string& dir, bool whole) {
  const fs::path d(dir);
  auto bad = [](const fs::path& p, const std::string& what) {
    return InputError(fmt::format("[checkpoint] {}: {}", p.string(), what));
  };
  // "checkpoints/step-5/" names step-5 too.
  const std::string base = (d.has_filename() ? d : d.parent_path()).filename().string();
  const auto step = step_of(base);
  if (!step) throw bad(d, "directory name is not step-N");
  std::error_code ec;
  for (const char* f : kFiles) {
    const fs::file_status st = fs::symlink_status(d / f, ec);
    if (fs::is_regular_file(st)) continue;
    if (!fs::exists(st)) {
      throw bad(d / f,
                "missing (a checkpoint has model.safetensors, optimizer.safetensors and "
                "trainer.json)");
    }
    struct stat raw {};
    ::lstat((d / f).c_str(), &raw);
    throw bad(d / f, fmt::format("is {}, not a regular file", files::file_type_text(raw.st_mode)));
  }
  CheckpointData out;
  out.trainer = files::read_file((d / kFiles[2]).string(), kMaxTrainerJsonBytes,
                                 "the checkpoint's trainer.json");
  auto ts = trainer_step(out.trainer);
  if (const auto* why = std::get_if<std::string>(&ts)) throw bad(d / kFiles[2], *why);
  if (std::get<int64_t>(ts) != *step) {
    throw bad(d / kFiles[2], fmt::format("\"step\" is {} but the directory is step-{}",
                                         std::get<int64_t>(ts), *step));
  }
  out.step = *step;
  // A damaged file's error says where to go instead, whenever it is found.
  const fs::path step_dir = d.has_filename() ? d : d.parent_path();
  const int64_t n = *step;
  auto advised = [step_dir, n](const auto& act) {
    try {
      return act();
    } catch (const InputError& e) {
      throw InputError(e.what() + earlier_checkpoint_advice(step_dir, n));
    }
  };
  std::shared_ptr<SafetensorsReader> files[2];
  for (int k : {0, 1}) {
    const std::string path = (d / kFiles[k]).string();
    files[k] = advised([&] { return std::make_shared<SafetensorsReader>(path, whole); });
  }
  auto reader = [advised](std::shared_ptr<SafetensorsReader> file) {
    return [advised, file](const std::string& name) {
      return advised([&] {
        Array a = file->read(name);
        if (first_nonfinite(a)) file->check_checksum_reading_the_rest();  // damage, if it is
        check_finite({{name, a}}, file->path());
        return a;
      });
    };
  };
  out.model_types = files[0]->types();
  out.model_tensor = reader(files[0]);
  out.optimizer_types = files[1]->types();
  out.optimizer_tensor = reader(files[1]);
  auto checksums = [advised](std::vector<std::shared_ptr<SafetensorsReader>> read) {
    return [advised, read] {
      advised([&] {
        for (const auto& file : read) file->check_checksum();
        return 0;
      });
    };
  };
  out.check_read = checksums({files[0], files[1]});
  out.check_model_read = checksums({files[0]});
  return out;
}

void hold_all_tensors(CheckpointData& d) {
  auto hold = [](const std::map<std::string, TensorType>& types,
                 const std::vector<std::string>& order,
                 std::function<Array(const std::string&)>& tensor, TensorMap& into) {
    if (!tensor) return;
    if (order.empty()) {
      for (const auto& [name, t] : types) into[name] = tensor(name);
    } else {
      for (const std::string& name : order) into[name] = tensor(name);
    }
    tensor = nullptr;
  };
  hold(d.model_types, d.model_order, d.model_tensor, d.model);
  hold(d.optimizer_types, d.optimizer_order, d.optimizer_tensor, d.optimizer);
  d.model_order.clear();
  d.optimizer_order.clear();
  if (d.check_read) d.check_read();
  d.check_read = nullptr;
  d.check_model_read = nullptr;
}

CheckpointData read_checkpoint(const std::string& dir) {
  CheckpointData out = open_checkpoint(dir, true);
  hold_all_tensors(out);
  return out;
}

void check_tensors(const std::map<std::string, TensorType>& want, const TensorMap& from,
                   const std::string& source) {
  std::map<std::string, TensorType> types;
  for (const auto& [name, a] : from) types[name] = {a.dtype(), a.shape()};
  check_tensors(want, types, source);
}

void check_tensors(const std::map<std::string, TensorType>& want,
                   const std::map<std::string, TensorType>& from, const std::string& source) {
  std::map<std::string, std::string> problems;  // sorted by name
  for (const auto& [name, here] : want) {
    auto it = from.find(name);
    if (it == from.end()) {
      problems[name] = "missing from the checkpoint";
      continue;
    }
    const TensorType& there = it->second;
    const bool dt = there.dtype != here.dtype, sh = there.shape != here.shape;
    if (dt && sh) {
      problems[name] =
          fmt::format("{}{} in the checkpoint, {}{} here", dtype_name(there.dtype),
                      shape_str(there.shape), dtype_name(here.dtype), shape_str(here.shape));
    } else if (dt) {
      problems[name] = fmt::format("dtype {} in the checkpoint, {} here", dtype_name(there.dtype),
                                   dtype_name(here.dtype));
    } else if (sh) {
      problems[name] = fmt::format("shape {} in the checkpoint, {} here", shape_str(there.shape),
                                   shape_str(here.shape));
    }
  }
  for (const auto& [name, a] : from) {
    if (!want.contains(name)) problems[name] = "in the checkpoint but not in this model";
  }
  if (!problems.empty()) {
    std::string list;
    for (const auto& [name, what] : problems) {
      list += fmt::format("{}{} {}", list.empty() ? "" : "; ", name, what);
    }
    throw InputError(fmt::format("[checkpoint] {}: {} {} not match this model: {}", source,
                                 problems.size(),
                                 problems.size() == 1 ? "tensor does" : "tensors do", list));
  }
}

void copy_into(TensorMap& into, const TensorMap& from, const std::string& source) {
  std::map<std::string, TensorType> want;
  for (const auto& [name, a] : into) want[name] = {a.dtype(), a.shape()};
  check_tensors(want, from, source);
  // Into the storage that exists: whoever shares these arrays (the Variables) sees the values.
  for (auto& [name, value] : into) {
    if (value.nbytes() > 0) std::memcpy(value.data(), from.at(name).data(), value.nbytes());
  }
}

}  // namespace keel::train
