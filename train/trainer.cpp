#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "backend/host_memory.h"
#include "cache/cache.h"
#include "data/loader.h"
#include "diag/tb_events.h"
#include "files/publish.h"
#include "ir/error.h"
#include "ir/utf8_escape.h"
#include "nn/layer_stack.h"
#include "policy/features.h"
#include "train/calibration.h"
#include "train/checkpoint.h"
#include "train/gpt_step.h"
#include "train/process_clock.h"
#include "train/sampler.h"
#include "train/segmented_step.h"

namespace keel::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<Tensor> fields_of(const data::Batch& b) {
  std::vector<Tensor> out;
  for (Array& a : b.fields()) out.emplace_back(std::move(a));
  return out;
}

TensorMap arrays_of(const Params& p) {
  TensorMap out;
  for (const auto& [name, t] : p) out[name] = t.array();
  return out;
}

Params tensors_of(const TensorMap& m) {
  Params out;
  for (const auto& [name, a] : m) out[name] = Tensor(a);
  return out;
}

void validate(const TrainOptions& o) {
  o.model.validate("--preset/--config");
  auto bad = [](const std::string& what) { return InputError("[train] " + what); };
  if (o.steps < 1) throw bad("--steps must be >= 1");
  if (o.accum < 1) throw bad("--accum must be >= 1");
  if (o.log_every < 1) throw bad("--log-every must be >= 1");
  if (o.eval_every < 0 || o.ckpt_every < 0) throw bad("--eval-every/--ckpt-every must be >= 0");
  if (o.keep < 1) throw bad("--keep must be >= 1");
  if (!(o.hyper.lr > 0)) throw bad("--lr must be > 0");
  if (o.fim_rate < 0 || o.fim_rate > 1) throw bad("--fim-rate must be in [0, 1]");
}

// One JSON line appended with a single write, so a crash never leaves half a line behind a
// complete one.
class JsonLines {
 public:
  explicit JsonLines(const std::string& path) : out_(path, std::ios::app) {
    if (!out_) throw Error(fmt::format("[train] cannot open {} for appending", path));
  }
  void write(const nlohmann::ordered_json& j) {
    std::string line = j.dump() + "\n";
    out_.write(line.data(), static_cast<std::streamsize>(line.size()));
    out_.flush();
  }

 private:
  std::ofstream out_;
};

EvalLog evaluate(const nn::GptConfig& model, EvalFn& eval_fn, const Params& params,
                 const std::vector<data::Document>& docs, int64_t batches, int64_t step) {
  // The same rows every evaluation and every run: a fixed seed, not the run's, picks rows from
  // all over the validation text (plain order would measure its first few files only).
  data::LoaderConfig lc;
  lc.batch = model.batch;
  lc.seq = model.seq;
  lc.seed = 0;
  lc.shuffle = true;
  data::Loader val(docs, lc);
  double nats = 0, count = 0;
  for (int64_t i = 0; i < batches; ++i) {
    auto [total, n] = eval_fn(params, fields_of(val.next()));
    nats += total.item();  // a log point: the host reads the metric here and only here
    count += n.item();
  }
  EvalLog e;
  e.step = step;
  e.loss = nats / std::max(count, 1.0);
  e.bits_per_byte = e.loss / std::log(2.0);
  return e;
}

// Beside the cache the run writes to (it outlives run directories); the run directory when the
// cache is not writable.
std::string calibration_file(const Runtime& rt, const std::string& run_dir) {
  const policy::LaunchPolicy& p = rt.policy();
  if (p.string("compile_cache.mode") != "readwrite") return run_dir + "/calibration.jsonl";
  const std::string& dir = p.string("compile_cache.dir");
  return (dir.empty() ? cache::default_cache_dir() : dir) + "/calibration.jsonl";
}

// A log point: the host reads the step's extra losses and the MoE counters it has accumulated
// over `steps` steps.
void read_model_metrics(const nn::GptConfig& model, const Counters& metrics,
                        const Counters& counters, int64_t steps, double tokens_per_step,
                        StepLog& s) {
  for (int64_t d = 1; d <= model.mtp_depth(); ++d) {
    s.mtp_loss.push_back(metrics.at(mtp_loss_key(d)).item());
  }
  if (model.moe_layers() == 0) return;
  s.moe_aux_loss = metrics.at("moe.aux_loss").item();
  const Array load = counters.at("moe.load").array();
  const int64_t E = model.moe.experts;
  s.moe_load.assign(static_cast<size_t>(model.moe_layers()), {});
  for (int64_t l = 0; l < model.moe_layers(); ++l) {
    for (int64_t e = 0; e < E; ++e)
      s.moe_load[static_cast<size_t>(l)].push_back(load.get_f64(l * E + e));
  }
  const double choices =
      double(steps) * tokens_per_step * double(model.moe.top_k * model.moe_layers());
  s.moe_dropped_fraction = counters.at("moe.dropped").item() / std::max(choices, 1.0);
}

struct Resumed {
  Params params, m, v;
  data::Cursor cursor;
  int64_t step = 0;
};

// Resume writes into what exists: the freshly initialised parameters and zeroed moments are
// overwritten name by name, and any mismatch is an error listing the tensors.
Resumed resume(const TrainOptions& o, const Runtime& rt, const Params& params, const Params& m,
               const Params& v, const TrainEvents& ev) {
  std::optional<std::string> dir = latest_checkpoint(o.run_dir);
  if (!dir) {
    throw InputError(fmt::format(
        "[train] --resume: no complete checkpoint under {}/checkpoints; start without --resume",
        o.run_dir));
  }
  CheckpointData d = read_checkpoint(*dir);
  nlohmann::json t = nlohmann::json::parse(d.trainer);
  std::string source = *dir + "/trainer.json";
  nn::GptConfig saved = nn::GptConfig::from_json(t.at("config").dump(), source);
  if (saved.to_json() != o.model.to_json() || t.value("accum", int64_t{1}) != o.accum) {
    throw InputError(fmt::format(
        "[train] {}: the checkpoint is of another config ({} accum {}) than this run ({} accum "
        "{}); resume with the same --preset/--config, --batch-size, --seq-len and --accum",
        source, saved.to_json(), t.value("accum", int64_t{1}), o.model.to_json(), o.accum));
  }
  if (t.contains("bundle")) {
    policy::Bundle theirs = policy::Bundle::from_json(t["bundle"].dump(), source);
    for (const std::string& d2 : theirs.differences(rt.bundle())) {
      if (ev.message)
        ev.message(fmt::format("resume: bundle differs from the checkpoint's: {}", d2));
    }
  }
  TensorMap p = arrays_of(params), opt_m = arrays_of(m), opt_v = arrays_of(v);
  copy_into(p, d.model, *dir + "/model.safetensors");
  TensorMap moments;
  for (const auto& [name, a] : opt_m) moments[name + ".exp_avg"] = a;
  for (const auto& [name, a] : opt_v) moments[name + ".exp_avg_sq"] = a;
  copy_into(moments, d.optimizer, *dir + "/optimizer.safetensors");
  Resumed r;
  r.params = tensors_of(p);
  for (const auto& [name, a] : opt_m) {
    r.m[name] = Tensor(moments.at(name + ".exp_avg"));
    r.v[name] = Tensor(moments.at(name + ".exp_avg_sq"));
  }
  r.cursor = data::Cursor::from_json(t.at("cursor").dump(), source);
  r.step = d.step;
  if (ev.message) ev.message(fmt::format("resumed from {} (step {})", *dir, d.step));
  return r;
}

}  // namespace

std::string TrainOptions::to_json() const {
  nlohmann::ordered_json j = {{"model", nlohmann::json::parse(model.to_json())},
                              {"steps", steps},
                              {"accum", accum},
                              {"lr", hyper.lr},
                              {"warmup_steps", hyper.warmup_steps},
                              {"total_steps", hyper.total_steps},
                              {"min_lr_ratio", hyper.min_lr_ratio},
                              {"beta1", hyper.beta1},
                              {"beta2", hyper.beta2},
                              {"eps", hyper.eps},
                              {"weight_decay", hyper.weight_decay},
                              {"clip_norm", hyper.clip_norm},
                              {"data", bytes_to_utf8(data)},  // paths and text: any bytes
                              {"run_dir", bytes_to_utf8(run_dir)},
                              {"log_every", log_every},
                              {"eval_every", eval_every},
                              {"eval_batches", eval_batches},
                              {"ckpt_every", ckpt_every},
                              {"keep", keep},
                              {"seed", seed},
                              {"fim_rate", fim_rate},
                              {"sample_bytes", sample_bytes},
                              {"prompt", bytes_to_utf8(prompt)}};
  return j.dump();
}

TrainResult run_training(Runtime& rt, const TrainOptions& o, const TrainEvents& ev) {
  validate(o);
  auto say = [&](const std::string& line) {
    if (ev.message) ev.message(line);
  };
  // features.request=scan_layers: repeated blocks loop inside the programs (the runtime already
  // warned or failed at start-up if the feature were unavailable).
  nn::GptConfig scanned = o.model;
  const std::vector<std::string> requested = rt.policy().strings("features.request");
  scanned.scan_layers =
      std::find(requested.begin(), requested.end(), "scan_layers") != requested.end() &&
      policy::find_feature(rt.bundle(), "scan_layers").available;
  const nn::GptConfig& model = scanned;

  // Data first: a bad corpus costs no compile.
  std::vector<std::string> paths = o.data;
  if (paths.empty()) paths = {data::libstdcxx_dir(rt.policy().string("codegen.compiler"))};
  data::Corpus corpus = data::load_corpus(paths);
  for (const std::string& note : corpus.notes) say(note);
  say(fmt::format("data: {} ({} training documents, {:.1f} MB; {} validation documents, {:.0f} KB)",
                  fmt::join(paths, ", "), corpus.train.size(), corpus.train_bytes() / 1e6,
                  corpus.validation.size(), corpus.validation_bytes() / 1e3));

  fs::create_directories(o.run_dir);
  // Barriers and scan change what is held at the peak, so they are part of what a calibration
  // is of.
  const int64_t barrier = rt.policy().integer("launch.barrier_every_n_layers");
  const std::string config_key_text =
      model.to_json() + fmt::format(" accum {}", o.accum) +
      (barrier > 0 ? fmt::format(" barrier_every_n_layers {}", barrier) : std::string()) +
      (model.scan_layers ? " scan_layers" : "");
  const std::string calib_file = calibration_file(rt, o.run_dir);
  const std::string calib_key = calibration_key(config_key_text, rt.bundle().hash());
  check_memory_budget(read_calibration(calib_file, calib_key),
                      rt.policy().integer("launch.memory_budget_bytes"), calib_file);

  InitFn init = make_gpt_init(model);
  Params params = init(Scalar(static_cast<double>(o.seed)));
  Params m = zeros_like_params(model), v = zeros_like_params(model);
  data::Cursor cursor;
  int64_t first_step = 1;
  if (o.resume) {
    Resumed r = resume(o, rt, params, m, v, ev);
    params = std::move(r.params);
    m = std::move(r.m);
    v = std::move(r.v);
    cursor = r.cursor;
    first_step = r.step + 1;
    if (first_step > o.steps) {
      throw InputError(fmt::format(
          "[train] --resume: the newest checkpoint is at step {} and --steps is {}; raise "
          "--steps to continue",
          r.step, o.steps));
    }
  }

  data::LoaderConfig lc;
  lc.micro_batches = o.accum;
  lc.batch = model.batch;
  lc.seq = model.seq;
  lc.fim_rate = o.fim_rate;
  lc.seed = o.seed;
  data::Loader loader(corpus.train, lc, cursor);
  TrainStepFn step_fn = make_train_step(model);
  EvalFn eval_fn = make_eval_step(model);
  Hyper h = o.hyper;
  // launch.barrier_every_n_layers: the step as a fixed set of smaller programs.
  std::optional<SegmentedStep> split;
  if (barrier > 0) {
    split.emplace(model, barrier);
    say(fmt::format("step split at layer barriers every {} layers: {} segments, programs {}",
                    barrier, split->segments().size(), fmt::join(split->program_names(), ", ")));
  }
  if (model.scan_layers) {
    // One line per distinct stack: the whole model, or each segment of another structure.
    std::set<std::string> said;
    for (auto [first, count] :
         split ? split->segments() : std::vector<std::pair<int64_t, int64_t>>{{0, model.layers}}) {
      if (said.insert(nn::layer_kinds(model, first, count)).second)
        say(nn::layer_plan(model, first, count).why);
    }
  }
  // A scanned stack in one program takes its layers' parameters and moments stored stacked, so
  // the update, like the blocks, does not grow with depth; checkpoints stay per layer.
  const bool stacked = model.scan_layers && !split;
  if (stacked) {
    params = nn::stack_layer_params(model, params);
    m = nn::stack_layer_params(model, m);
    v = nn::stack_layer_params(model, v);
  }
  auto per_layer = [&](const Params& p) {
    return stacked ? nn::unstack_layer_params(model, p) : p;
  };
  auto run_step = [&](const Counters& c, const std::vector<Tensor>& b, int64_t s) {
    if (split) return (*split)(params, m, v, c, b, step_scalars(h, s));
    return step_fn(params, m, v, c, b, step_scalars(h, s));
  };

  // Everything the first step needs is traced and compiled (or loaded) before it runs.
  Counters counters = zero_counters(model);
  int64_t counted_steps = 0;  // steps the counters hold since they were last read
  const std::vector<Tensor> empty = fields_of(data::empty_batch(o.accum, model.batch, model.seq));
  if (split) {
    split->prepare(params, m, v, counters, empty, step_scalars(h, first_step));
  } else {
    step_fn.prepare(params, m, v, counters, empty, step_scalars(h, first_step));
  }
  const double time_to_first_step = seconds_since_process_start();
  say(fmt::format("first step after {:.2f} s (runtime, data, trace, compile or load)",
                  time_to_first_step));

  JsonLines metrics(o.run_dir + "/metrics.jsonl");
  diag::EventWriter tb(o.run_dir + "/tb");
  auto wall = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const double tokens_per_step = double(o.accum * model.batch * model.seq);
  std::vector<double> step_seconds;
  TrainResult result;
  result.first_step = first_step;
  double window = 0;
  int64_t window_steps = 0;
  for (int64_t step = first_step; step <= o.steps; ++step) {
    std::vector<Tensor> batch = fields_of(loader.next());
    const int64_t compiles_before = rt.jit().log().counters().compiles;
    auto t0 = Clock::now();
    auto [loss, norm, lr, p2, m2, v2, step_metrics] = run_step(counters, batch, step);
    const double dt = seconds(t0, Clock::now());
    params = std::move(p2);
    m = std::move(m2);
    v = std::move(v2);
    counters = counters_of(step_metrics);
    ++counted_steps;
    if (step > first_step) step_seconds.push_back(dt);
    window += dt;
    ++window_steps;
    if (ev.tick) ev.tick(step, o.steps);
    const bool compiled = rt.jit().log().counters().compiles != compiles_before;
    if (step % o.log_every == 0 || step == o.steps || step == first_step || compiled) {
      StepLog s;  // a log point: the only place the host reads the step's metrics
      s.step = step;
      s.total = o.steps;
      s.loss = loss.item();
      s.lr = lr.item();
      s.grad_norm = norm.item();
      s.ms = 1000.0 * window / double(window_steps);
      s.tokens_per_s = tokens_per_step * double(window_steps) / std::max(window, 1e-9);
      s.compiled = compiled;
      window = 0;
      window_steps = 0;
      nlohmann::ordered_json line = {{"step", step},        {"loss", s.loss},
                                     {"lr", s.lr},          {"grad_norm", s.grad_norm},
                                     {"ms_per_step", s.ms}, {"tokens_per_s", s.tokens_per_s},
                                     {"compiled", compiled}};
      read_model_metrics(model, step_metrics, counters, counted_steps, tokens_per_step, s);
      if (!s.mtp_loss.empty()) line["mtp_loss"] = s.mtp_loss;
      if (model.moe_layers() > 0) {
        line["moe"] = {{"aux_loss", s.moe_aux_loss},
                       {"load", s.moe_load},
                       {"dropped_fraction", s.moe_dropped_fraction},
                       {"steps", counted_steps}};
        counters = zero_counters(model);  // a new window: fresh zeros, same program
        counted_steps = 0;
      }
      metrics.write(line);
      const double now = wall();
      tb.add_scalar("train/loss", step, float(s.loss), now);
      tb.add_scalar("train/learning_rate", step, float(s.lr), now);
      tb.add_scalar("train/grad_norm", step, float(s.grad_norm), now);
      tb.add_scalar("train/tokens_per_s", step, float(s.tokens_per_s), now);
      for (size_t d = 0; d < s.mtp_loss.size(); ++d) {
        tb.add_scalar(fmt::format("train/mtp_loss_{}", d + 1), step, float(s.mtp_loss[d]), now);
      }
      if (model.moe_layers() > 0) {
        tb.add_scalar("train/moe_aux_loss", step, float(s.moe_aux_loss), now);
        tb.add_scalar("train/moe_dropped_fraction", step, float(s.moe_dropped_fraction), now);
      }
      tb.flush();
      result.final_loss = s.loss;
      if (ev.log) ev.log(s);
    }
    const bool last = step == o.steps;
    if ((o.eval_every > 0 && step % o.eval_every == 0) || last) {
      EvalLog e = evaluate(model, eval_fn, params, corpus.validation, o.eval_batches, step);
      metrics.write({{"step", step}, {"val_loss", e.loss}, {"val_bits_per_byte", e.bits_per_byte}});
      tb.add_scalar("val/loss", step, float(e.loss), wall());
      tb.add_scalar("val/bits_per_byte", step, float(e.bits_per_byte), wall());
      tb.flush();
      result.final_eval = e;
      if (ev.eval) ev.eval(e);
    }
    if ((o.ckpt_every > 0 && step % o.ckpt_every == 0) || last) {
      CheckpointData d;
      d.step = step;
      d.model = arrays_of(per_layer(params));
      for (const auto& [name, t] : per_layer(m)) d.optimizer[name + ".exp_avg"] = t.array();
      for (const auto& [name, t] : per_layer(v)) d.optimizer[name + ".exp_avg_sq"] = t.array();
      nlohmann::ordered_json t = {{"step", step},
                                  {"cursor", nlohmann::json::parse(loader.cursor().to_json())},
                                  {"config", nlohmann::json::parse(model.to_json())},
                                  {"accum", o.accum},
                                  {"seed", o.seed},
                                  {"options", nlohmann::json::parse(o.to_json())},
                                  {"bundle", nlohmann::json::parse(rt.bundle().to_json())},
                                  {"policy", nlohmann::json::parse(rt.policy().to_json(true))}};
      d.trainer = t.dump(2);
      say(fmt::format("checkpoint {}", write_checkpoint(o.run_dir, d, o.keep)));
    }
  }
  result.last_step = o.steps;
  if (o.sample_bytes > 0) {
    result.sample = sample_text(model, params, o.prompt, o.sample_bytes, o.seed);
  }

  // The run record: what ran, under which bundle and policy, and what it cost.
  diag::Counters n = rt.jit().log().counters();
  std::set<std::string> programs;
  for (const diag::CompileEvent& e : rt.jit().log().events()) programs.insert(e.key);
  std::sort(step_seconds.begin(), step_seconds.end());
  const double median = step_seconds.empty() ? 0 : step_seconds[step_seconds.size() / 2];
  int64_t predicted = rt.jit().predicted_peak_bytes();
  if (split) {
    ProgramMemoryMap memory;
    for (const auto& [name, pm] : rt.jit().program_memory()) {
      memory[name] = {pm.peak_bytes, pm.input_bytes};
    }
    // The largest single program (evaluation may be it) or the split step with what it holds.
    predicted = std::max(predicted, split->predicted_peak_bytes(memory, model.batch, model.seq));
  }
  const int64_t observed = backend::host_memory_stats().peak_bytes_in_use;
  nlohmann::ordered_json record = {
      {"bundle", nlohmann::json::parse(rt.bundle().to_json())},
      {"bundle_hash", rt.bundle().hash()},
      {"policy", nlohmann::json::parse(rt.policy().to_json(true))},
      {"config", nlohmann::json::parse(o.to_json())},
      {"time_to_first_step_s", time_to_first_step},
      {"programs", programs.size()},
      {"compiles", n.compiles},
      {"cache",
       {{"memory_hits", n.memory_hits},
        {"disk_hits", n.disk_hits},
        {"compiled", n.compiles},
        {"compile_seconds", n.compile_seconds},
        {"load_seconds", n.load_seconds}}},
      {"memory", {{"predicted_peak_bytes", predicted}, {"observed_peak_bytes", observed}}},
      {"metrics",
       {{"first_step", first_step},
        {"last_step", o.steps},
        {"train_loss", result.final_loss},
        {"val_loss", result.final_eval.loss},
        {"val_bits_per_byte", result.final_eval.bits_per_byte},
        {"median_step_seconds", median},
        {"tokens_per_s", median > 0 ? tokens_per_step / median : 0.0}}},
      {"sample", bytes_to_utf8(result.sample)}};  // an untrained model's bytes: any bytes
  result.record_path = o.run_dir + "/record.json";
  files::publish_file(result.record_path, record.dump(2) + "\n");
  append_calibration(calib_file, {calib_key, predicted, observed});
  return result;
}

}  // namespace keel::train
