#include "train/metrics_sink.h"

#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>

#include "files/publish.h"
#include "files/read.h"
#include "ir/error.h"

namespace keel::train {
namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr int64_t kMaxMetricsBytes = int64_t{1} << 30;

}  // namespace

int64_t drop_metrics_after(const std::string& run_dir, int64_t step) {
  const std::string path = run_dir + "/metrics.jsonl";
  std::optional<std::string> text = files::read_file_if_exists(path, kMaxMetricsBytes, "metrics");
  if (!text) return 0;
  std::string kept;
  int64_t dropped = 0;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    // A line that is not a log point (torn, edited) is dropped too.
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool keep = j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                      j["step"].get<int64_t>() <= step && in.good();
    if (keep) {
      kept += line + "\n";
    } else {
      ++dropped;
    }
  }
  if (dropped > 0) files::publish_file(path, kept);
  return dropped;
}

MetricsSink::MetricsSink(const std::string& run_dir)
    : out_(run_dir + "/metrics.jsonl", "metrics", {.single_writer = true, .lines = true}),
      tb_(run_dir + "/tb") {}

// One write per line and fsynced with the TensorBoard events: a log point is on disk or absent.
void MetricsSink::line(const std::string& json) {
  out_.append(json + "\n");
  out_.sync();
}

void MetricsSink::step(const StepLog& s, bool moe, int64_t moe_steps) {
  nlohmann::ordered_json j = {
      {"step", s.step},           {"loss", s.loss},      {"lr", s.lr},
      {"grad_norm", s.grad_norm}, {"ms_per_step", s.ms}, {"tokens_per_s", s.tokens_per_s},
      {"compiled", s.compiled}};
  if (!s.mtp_loss.empty()) j["mtp_loss"] = s.mtp_loss;
  if (s.indexer_kl) j["indexer_kl"] = *s.indexer_kl;
  if (!s.rank_busy_ms.empty()) j["rank_busy_ms"] = s.rank_busy_ms;
  if (moe) {
    j["moe"] = {{"aux_loss", s.moe_aux_loss},
                {"load", s.moe_load},
                {"dropped_fraction", s.moe_dropped_fraction},
                {"steps", moe_steps}};
  }
  line(j.dump());
  const double now = wall_seconds();
  tb_.add_scalar("train/loss", s.step, float(s.loss), now);
  tb_.add_scalar("train/learning_rate", s.step, float(s.lr), now);
  tb_.add_scalar("train/grad_norm", s.step, float(s.grad_norm), now);
  tb_.add_scalar("train/tokens_per_s", s.step, float(s.tokens_per_s), now);
  for (size_t d = 0; d < s.mtp_loss.size(); ++d) {
    tb_.add_scalar(fmt::format("train/mtp_loss_{}", d + 1), s.step, float(s.mtp_loss[d]), now);
  }
  if (s.indexer_kl) tb_.add_scalar("train/indexer_kl", s.step, float(*s.indexer_kl), now);
  for (size_t k = 0; k < s.rank_busy_ms.size(); ++k) {
    tb_.add_scalar(fmt::format("ranks/busy_ms_rank{}", k), s.step, float(s.rank_busy_ms[k]), now);
  }
  if (moe) {
    tb_.add_scalar("train/moe_aux_loss", s.step, float(s.moe_aux_loss), now);
    tb_.add_scalar("train/moe_dropped_fraction", s.step, float(s.moe_dropped_fraction), now);
  }
  tb_.flush();
}

void MetricsSink::eval(const EvalLog& e) {
  line(nlohmann::ordered_json{
      {"step", e.step}, {"val_loss", e.loss}, {"val_bits_per_byte", e.bits_per_byte}}
           .dump());
  const double now = wall_seconds();
  tb_.add_scalar("val/loss", e.step, float(e.loss), now);
  tb_.add_scalar("val/bits_per_byte", e.step, float(e.bits_per_byte), now);
  tb_.flush();
}

}  // namespace keel::train
