#include "tools/keel/explain_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "files/read.h"
#include "ir/error.h"

namespace keel::cli {
namespace {

constexpr int64_t kMaxRecordBytes = int64_t{1} << 30;

using Json = nlohmann::json;

std::string shape_text(const Json& shape) {
  std::vector<int64_t> dims = shape.get<std::vector<int64_t>>();
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// "whole", or "data/2 [1536]": split over the axis's processes, the slice each holds.
std::string split_text(const Json& part) {
  if (part.at("split").get<std::string>() == "whole") return "whole";
  return fmt::format("{}/{} {}", part.at("split").get<std::string>(),
                     part.at("processes").get<int64_t>(), shape_text(part.at("local_shape")));
}

std::string megabytes(int64_t bytes) {
  return fmt::format("{:.3f} MB", static_cast<double>(bytes) / 1e6);
}

}  // namespace

std::string describe_state(const std::string& run_dir) {
  const std::string file = run_dir + "/record.json";
  const std::optional<std::string> text =
      files::read_file_if_exists(file, kMaxRecordBytes, "the run record");
  if (!text) return "";
  const Json record = Json::parse(*text, nullptr, false);
  if (record.is_discarded() || !record.is_object()) {
    throw InputError(fmt::format(
        "[cli] {}: not a JSON object (damaged or cut short); run keel train again to rewrite it",
        file));
  }
  if (!record.contains("state")) return "";
  try {
    const Json& s = record.at("state");
    std::vector<std::vector<std::string>> rows = {
        {"tensor", "shape", "parameter", "gradient", "moments (m, v)", "bytes a process"}};
    for (const Json& t : s.at("tensors")) {
      rows.push_back({t.at("name").get<std::string>(), shape_text(t.at("shape")),
                      split_text(t.at("parameter")), split_text(t.at("gradient")),
                      split_text(t.at("moments")),
                      fmt::format("{}", t.at("bytes_per_process").get<int64_t>())});
    }
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& r : rows) {
      for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    }
    const int64_t model = s.value("model_processes", int64_t{1});  // absent before TP
    std::string out = fmt::format(
        "training state (sharding.zero = {}, the {} axis of {} processes{}): {} a process\n",
        s.at("zero").get<int64_t>(), s.at("axis").get<std::string>(),
        s.at("processes").get<int64_t>(),
        model > 1 ? fmt::format(", the blocks split over {} processes of model", model)
                  : std::string(),
        megabytes(s.at("bytes_per_process").get<int64_t>()));
    for (const auto& r : rows) {
      std::string line = " ";
      for (size_t c = 0; c < r.size(); ++c) line += fmt::format(" {:<{}}", r[c], width[c]);
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  } catch (const Json::exception& e) {
    throw InputError(
        fmt::format("[cli] {}: field \"state\" is damaged ({}); run keel train again to rewrite it",
                    file, e.what()));
  }
}

}  // namespace keel::cli
