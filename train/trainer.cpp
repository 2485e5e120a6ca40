// The trainer as named phases: data, memory calibration, the start (init or resume), the step
// programs, the step loop (log points, evaluation, checkpoints), the sample and the run record.
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "backend/host_memory.h"
#include "data/loader.h"
#include "diag/run_report.h"
#include "diag/trace_events.h"
#include "dist/communicator.h"
#include "dist/deadline.h"
#include "files/memory_limit.h"
#include "files/process_clock.h"
#include "ir/error.h"
#include "ir/utf8_escape.h"
#include "ir/version.h"
#include "nn/layer_stack.h"
#include "policy/features.h"
#include "train/calibration.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/evaluate.h"
#include "train/metrics_sink.h"
#include "train/resume.h"
#include "train/run_record.h"
#include "train/run_trace.h"
#include "train/sampler.h"
#include "train/step_runner.h"
#include "train/stop_request.h"

namespace keel::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

void validate(const TrainOptions& o) {
  o.model.validate("--preset/--config", data::kVocab);
  auto bad = [](const std::string& what) { return InputError("[train] " + what); };
  if (o.steps < 1) throw bad("--steps must be >= 1");
  if (o.accum < 1) throw bad("--accum must be >= 1");
  if (o.log_every < 1) throw bad("--log-every must be >= 1");
  if (o.eval_every < 0 || o.ckpt_every < 0) throw bad("--eval-every/--ckpt-every must be >= 0");
  if (o.keep < 1) throw bad("--keep must be >= 1");
  if (!(o.hyper.lr > 0) || !std::isfinite(o.hyper.lr)) {
    throw bad(fmt::format("--lr {} is not a learning rate; give a finite number > 0", o.hyper.lr));
  }
  if (o.fim_rate < 0 || o.fim_rate > 1) throw bad("--fim-rate must be in [0, 1]");
}

std::vector<Tensor> fields_of(const data::Batch& b) {
  std::vector<Tensor> out;
  for (Array& a : b.fields()) out.emplace_back(std::move(a));
  return out;
}

// The run's context: what every phase reads.
struct Run {
  Runtime& rt;
  const TrainOptions& o;
  const TrainEvents& ev;  // the caller's on the leader; none on the other processes
  nn::GptConfig model;    // with scan_layers as the policy asks
  int64_t barrier = 0;    // launch.barrier_every_n_layers
  DataShare share;        // this process's part of the data axis
  void say(const std::string& line) const {
    if (ev.message) ev.message(line);
  }
  int64_t global_accum() const { return o.accum * share.ranks; }
};

// features.request=scan_layers: repeated blocks loop inside the programs (the runtime already
// warned or failed at start-up if the feature were unavailable); launch.remat_layers makes
// their gradient recompute each iteration, which only a scanned stack can, keeping what
// launch.remat_policy names.
nn::GptConfig with_layer_scan(const Runtime& rt, nn::GptConfig model) {
  const std::vector<std::string> requested = rt.policy().strings("features.request");
  model.scan_layers =
      std::find(requested.begin(), requested.end(), "scan_layers") != requested.end() &&
      policy::find_feature(rt.bundle(), "scan_layers").available;
  model.remat_layers = rt.policy().boolean("launch.remat_layers");
  if (model.remat_layers && !model.scan_layers) {
    throw InputError(
        "[train] launch.remat_layers = true recomputes the layers of a scanned stack, and this "
        "launch does not scan its layers; add --set features.request=scan_layers, or drop "
        "launch.remat_layers");
  }
  const std::string policy = rt.policy().string("launch.remat_policy");
  model.remat_policy = remat_policy_named(policy).value_or(RematPolicy::nothing_saveable);
  if (model.remat_policy != RematPolicy::nothing_saveable && !model.remat_layers) {
    throw InputError(
        fmt::format("[train] launch.remat_policy = {} says what a recomputed layer keeps, and "
                    "launch.remat_layers is false; add --set launch.remat_layers=true, or drop "
                    "launch.remat_policy",
                    policy));
  }
  return model;
}

// Phase 1, data first: a bad corpus costs no compile.
data::Corpus load_data(const Run& r) {
  diag::TraceSpan span("data", "data", {{"what", "corpus"}});
  std::vector<std::string> paths = r.o.data;
  if (paths.empty()) paths = {data::libstdcxx_dir(r.rt.policy().string("cpu.compiler"))};
  data::Corpus corpus = data::load_corpus(paths);
  for (const std::string& note : corpus.notes) r.say(note);
  r.say(
      fmt::format("data: {} ({} training documents, {:.1f} MB; {} validation documents, {:.0f} KB)",
                  fmt::join(paths, ", "), corpus.train.size(), corpus.train_bytes() / 1e6,
                  corpus.validation.size(), corpus.validation_bytes() / 1e3));
  return corpus;
}

// Phase 2: the memory this config needed last time, checked against the budget before any
// compile. Barriers and scan change what is held at the peak, so they are part of the config.
CalibrationTarget check_calibration(const Run& r) {
  const std::string text =
      r.model.to_json() + fmt::format(" accum {}", r.o.accum) +
      (r.share.ranks > 1 ? fmt::format(" ranks {}", r.share.ranks) : std::string()) +
      (r.barrier > 0 ? fmt::format(" barrier_every_n_layers {}", r.barrier) : std::string()) +
      (r.model.scan_layers ? " scan_layers" : "") + (r.model.remat_layers ? " remat_layers" : "") +
      (r.model.remat_policy != RematPolicy::nothing_saveable
           ? fmt::format(" {}", remat_policy_name(r.model.remat_policy))
           : std::string());
  // The host's memory, or the launch's budget for it when that is lower.
  files::MemoryLimit limit = files::memory_limit();
  limit.source = "this host's memory: " + limit.source;
  const int64_t budget = r.rt.policy().integer("launch.memory_budget_bytes");
  if (budget > 0 && (limit.bytes <= 0 || budget < limit.bytes)) {
    limit = {budget, "launch.memory_budget_bytes"};
  }
  check_state_fits(r.model.name, nn::gpt_param_count(r.model), dist::processes_on_this_host(),
                   limit.bytes, limit.source);
  CalibrationTarget target = calibration_target(r.rt, r.o.run_dir, text);
  check_memory_budget(read_calibration(target.file, target.config_id),
                      r.rt.policy().integer("launch.memory_budget_bytes"), target.file,
                      dist::processes_on_this_host());
  return target;
}

// The step's layout in one line each: the split, and the scan plan of each distinct stack.
void describe_layout(const Run& r, const StepRunner& runner) {
  const SegmentedStep* split = runner.split();
  if (split) {
    r.say(fmt::format("step split at layer barriers every {} layers: {} segments, programs {}",
                      r.barrier, split->segments().size(),
                      fmt::join(split->program_names(), ", ")));
  }
  if (!r.model.scan_layers) return;
  std::set<std::string> said;
  for (auto [first, count] :
       split ? split->segments() : std::vector<std::pair<int64_t, int64_t>>{{0, r.model.layers}}) {
    if (said.insert(nn::layer_kinds(r.model, first, count)).second)
      r.say(nn::layer_plan(r.model, first, count).why);
  }
}

// A scalar read by the host. A NaN's sign bit is noise; printed it would read "-nan".
double host_value(const Tensor& t) {
  const double v = t.item();
  return std::isnan(v) ? std::nan("") : v;
}

// A log point: the host reads the step's metrics and the MoE counters summed over `steps`.
StepLog read_log_point(const nn::GptConfig& model, const StepResult& out, const TrainState& state,
                       int64_t steps, double tokens_per_step) {
  StepLog s;
  s.loss = host_value(out.loss);
  s.lr = host_value(out.lr);
  s.grad_norm = host_value(out.grad_norm);
  for (int64_t d = 1; d <= model.mtp_depth(); ++d) {
    s.mtp_loss.push_back(host_value(out.metrics.at(mtp_loss_key(d))));
  }
  if (model.moe_layers() == 0) return s;
  s.moe_aux_loss = out.metrics.at("moe.aux_loss").item();
  const Counters counters = state.counters.tensors();
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
  return s;
}

// The loss and gradient norm are reduced over every process, so every rank that checks a step
// sees the same figures and stops with the same line.
void stop_if_diverged(int64_t step, double loss, double grad_norm, int64_t last_checkpoint,
                      double lr) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return;
  dist::mark_failure_shared();
  throw Error(fmt::format(
      "[train] step {}: the loss is {:.4g} and the gradient norm {:.4g}: training diverged. "
      "metrics.jsonl has the step; {}. Lower --lr (peak {:g}) or lengthen --warmup; "
      "--on-nonfinite continue trains on",
      step, loss, grad_norm,
      last_checkpoint > 0 ? fmt::format("the newest checkpoint is step-{}", last_checkpoint)
                          : std::string("no checkpoint was written"),
      lr));
}

void save_checkpoint(const Run& r, const TrainState& state, const data::Loader& loader,
                     int64_t step) {
  diag::TraceSpan span(fmt::format("checkpoint {}", step), "checkpoint", {{"step", step}});
  CheckpointData d;
  d.step = step;
  state_to_checkpoint(state, r.model, d);
  nlohmann::ordered_json t = {{"format", Formats::checkpoint},
                              {"step", step},
                              {"cursor", nlohmann::json::parse(loader.cursor().to_json())},
                              {"config", nlohmann::json::parse(r.model.to_json())},
                              {"accum", r.global_accum()},  // over every process
                              {"seed", r.o.seed},
                              {"options", nlohmann::json::parse(r.o.to_json())},
                              {"bundle", nlohmann::json::parse(r.rt.bundle().to_json())},
                              {"policy", nlohmann::json::parse(r.rt.policy().to_json(true))}};
  d.trainer = t.dump(2);
  r.say(fmt::format("checkpoint {}", write_checkpoint(r.o.run_dir, d, r.o.keep)));
}

// RUN_DIR/report.html; one that cannot be written is a message, never the run's error.
std::string write_report(const std::string& run_dir, const Run& r, const char* what) {
  try {
    const std::string path = diag::write_run_report(run_dir);
    r.say(fmt::format("report {}{}", what, path));
    return path;
  } catch (const std::exception& e) {
    r.say(fmt::format("[report] not written: {}", e.what()));
    return "";
  }
}

// The planner's peak: the largest program's, or the split step with what the host holds.
int64_t predicted_peak(Runtime& rt, const StepRunner& runner, const nn::GptConfig& model,
                       int64_t micro_batches) {
  int64_t predicted = rt.jit().predicted_peak_bytes();
  if (const SegmentedStep* split = runner.split()) {
    ProgramMemoryMap memory;
    for (const auto& [name, pm] : rt.jit().program_memory()) {
      memory[name] = {pm.peak_bytes, pm.input_bytes};
    }
    predicted = std::max(
        predicted, split->predicted_peak_bytes(memory, model.batch, model.seq, micro_batches));
  }
  return predicted;
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
                              {"prompt", bytes_to_utf8(prompt)},
                              {"stop_on_nonfinite", stop_on_nonfinite}};
  return j.dump();
}

namespace {

// A stop request (SIGINT, SIGTERM, SIGUSR1) before the first step, in one process: it ends
// the run there (a compile in flight is killed). Nothing changed since the checkpoint it
// started from, if any, so there is nothing to write. Under a launcher the processes agree on
// a step to stop after instead, as one process alone cannot stop the others.
int stop_before_steps(const Runtime& rt) {
  return rt.place().size == 1 ? stop_requested() : 0;
}

// How far a run got before its steps: where they start (0 until its checkpoint, if any, is
// read), and whether they have.
struct StartUp {
  int64_t first_step = 0;
  bool stepping = false;
};

TrainResult stopped_before_steps(const TrainEvents& ev, int signal, int64_t first_step,
                                 const std::string& during) {
  if (ev.message) {
    ev.message(fmt::format(
        "stopped before {} (signal {}){}; no step ran, so there is nothing to checkpoint; {}",
        first_step > 0 ? fmt::format("step {}", first_step) : std::string("the first step"), signal,
        during.empty() ? "" : ": " + during,
        first_step > 1 ? fmt::format("--resume continues from step-{}", first_step - 1)
                       : std::string("the same command starts it again")));
  }
  TrainResult stopped;
  stopped.first_step = first_step;
  stopped.last_step = first_step - 1;
  stopped.stop_signal = signal;
  return stopped;
}

TrainResult train_phases(Runtime& rt, const TrainOptions& o, const TrainEvents& ev,
                         StartUp& startup) {
  validate(o);
  const DataShare share = data_share(rt);
  const TrainEvents events = share.leader ? ev : TrainEvents{};  // only the leader reports
  Run r{rt,
        o,
        events,
        with_layer_scan(rt, o.model),
        rt.policy().integer("launch.barrier_every_n_layers"),
        share};
  if (rt.mesh().size() > 1 && rt.mesh().axis_size(kDataAxis) == 0) {
    throw InputError(fmt::format(
        "[train] the mesh {} has {} devices but no axis '{}', which keel train splits the batch "
        "over; name one of spmd.mesh_axes 'data'",
        rt.mesh().str(), rt.mesh().size(), kDataAxis));
  }
  if ((r.share.ranks & (r.share.ranks - 1)) != 0 && o.accum > 1) {
    r.say(fmt::format(
        "data parallel over {} processes with --accum {}: results match one process with "
        "--accum {} only to rounding (bit for bit needs a power-of-two process count or "
        "--accum 1; dist/fixed_order.h)",
        r.share.ranks, o.accum, r.global_accum()));
  }
  const data::Corpus corpus = load_data(r);
  if (const int signal = stop_before_steps(rt)) {
    return stopped_before_steps(r.ev, signal, startup.first_step, "");
  }
  fs::create_directories(o.run_dir);
  const CalibrationTarget calibration = check_calibration(r);

  // Phase 3: the programs and the state they update. A scanned stack in one program keeps its
  // layers' tensors stacked, so the update, like the blocks, does not grow with depth.
  const StepRunner runner(r.model, r.barrier);
  describe_layout(r, runner);
  Start start =
      start_run(o, rt, r.model, r.model.scan_layers && !runner.split(), r.ev, r.global_accum());
  TrainState& state = start.state;
  startup.first_step = start.first_step;
  if (const int signal = stop_before_steps(rt)) {
    return stopped_before_steps(r.ev, signal, start.first_step, "");
  }
  data::LoaderConfig lc;
  lc.micro_batches = r.global_accum();  // the global batch; this process takes its share
  lc.batch = r.model.batch;
  lc.seq = r.model.seq;
  lc.fim_rate = o.fim_rate;
  lc.seed = o.seed;
  data::Loader loader(corpus.train, lc, start.cursor);
  const EvalFn eval_fn = make_eval_step(r.model);

  // Phase 4: everything the first step needs is traced and compiled (or loaded) before it runs.
  const std::vector<Tensor> empty =
      fields_of(data::empty_batch(o.accum, r.model.batch, r.model.seq));
  runner.prepare(state, empty, step_scalars(o.hyper, start.first_step));
  // Evaluation and the final sample too: every program the run needs exists before step 1, so
  // the programs curve is flat from there and a sealed cache that lacks one stops the run now.
  eval_fn.prepare(state.params.tensors(),
                  fields_of(data::empty_batch(1, r.model.batch, r.model.seq)));
  if (o.sample_bytes > 0 && r.share.leader) prepare_sampler(r.model, state.params.tensors());
  RunFigures figures;
  figures.time_to_first_step_s = files::seconds_since_process_start();
  figures.tokens_per_step = double(r.global_accum() * r.model.batch * r.model.seq);
  r.say(fmt::format("first step after {:.2f} s (runtime, data, trace, compile or load)",
                    figures.time_to_first_step_s));
  // Marked before the last look, so a signal from here on waits for the step in flight.
  mark_steps_started();
  if (const int signal = stop_before_steps(rt)) {
    return stopped_before_steps(r.ev, signal, start.first_step, "");
  }
  startup.stepping = true;

  // Phase 5: the steps, with log points, evaluation and checkpoints. The JIT logs compiles at
  // the training step while the run lasts, then at each function's own calls again.
  struct StepDeclared {
    runtime::Jit& jit;
    ~StepDeclared() { jit.set_step(-1); }
  } declared{rt.jit()};
  std::optional<MetricsSink> sink;
  if (r.share.leader) {
    if (o.resume) {
      if (const int64_t n = drop_metrics_after(o.run_dir, start.first_step - 1); n > 0) {
        r.say(
            fmt::format("metrics: dropped {} lines after step {} (the run that went past the "
                        "checkpoint); metrics.jsonl holds each step once",
                        n, start.first_step - 1));
      }
    }
    sink.emplace(o.run_dir);
  }
  TrainResult result;
  result.first_step = start.first_step;
  double window = 0;
  int64_t window_steps = 0, counted_steps = 0;  // counted: steps the counters hold
  bool evaluated = false;  // the first evaluation's gather waits out every rank's compile
  int64_t last_checkpoint = start.first_step - 1;  // 0: none yet
  // Busy time: since this process last spoke to the others after a step, less its waits for
  // them and the leader's own writes (checkpoints, metrics), which the others wait out; per rank
  // over the window.
  auto said_at = Clock::now();
  double waited_at = dist::collective_wait_seconds(), leader_only = 0;
  std::vector<double> window_busy;
  for (int64_t step = start.first_step; step <= o.steps; ++step) {
    rt.jit().set_step(step);
    std::optional<diag::TraceSpan> fetch(std::in_place, "batch", "data",
                                         nlohmann::json{{"step", step}});
    const std::vector<Tensor> batch = share_of(loader.next(), r.share, o.accum);
    fetch.reset();
    const int64_t compiles_before = rt.jit().log().counters().compiles;
    const auto t0 = Clock::now();
    std::optional<diag::TraceSpan> span(std::in_place, fmt::format("step {}", step), "step",
                                        nlohmann::json{{"step", step}});
    const StepResult out = runner.run(state, batch, step_scalars(o.hyper, step));
    span.reset();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    ++counted_steps;
    if (step > start.first_step) figures.step_seconds.push_back(dt);
    window += dt;
    ++window_steps;
    if (r.ev.tick) r.ev.tick(step, o.steps);
    const bool compiled = rt.jit().log().counters().compiles != compiles_before;
    const bool last = step == o.steps;
    // A stop request (SIGTERM, Ctrl-C) ends the run after this step, logged and checkpointed.
    const auto now = Clock::now();
    const double waited = dist::collective_wait_seconds();
    const double busy =
        std::chrono::duration<double>(now - said_at).count() - (waited - waited_at) - leader_only;
    said_at = now;
    waited_at = waited;
    leader_only = 0;
    const AfterStep said = agree_after_step(last ? 0 : stop_requested(), busy, step);
    const int stop = said.stop;
    window_busy.resize(said.busy_s.size(), 0.0);
    for (size_t k = 0; k < said.busy_s.size(); ++k) window_busy[k] += said.busy_s[k];
    // `compiled` is a rank's own; the other reasons to log are the same on every rank.
    const bool every_rank_logs =
        step % o.log_every == 0 || last || step == start.first_step || stop;
    if (every_rank_logs || compiled) {
      StepLog s = read_log_point(r.model, out, state, counted_steps, figures.tokens_per_step);
      s.step = step;
      s.total = o.steps;
      s.ms = 1000.0 * window / double(window_steps);
      s.tokens_per_s = figures.tokens_per_step * double(window_steps) / std::max(window, 1e-9);
      s.compiled = compiled;
      for (double& b : window_busy) {
        s.rank_busy_ms.push_back(1000.0 * b / double(window_steps));
        b = 0;
      }
      if (sink) {  // the leader's own writes (fsynced), which the others wait out
        const auto writing = Clock::now();
        sink->step(s, r.model.moe_layers() > 0, counted_steps);
        leader_only += std::chrono::duration<double>(Clock::now() - writing).count();
      }
      if (r.model.moe_layers() > 0) {
        state.counters.assign(zero_counters(r.model));  // a new window, in the same buffers
        counted_steps = 0;
      }
      window = 0;
      window_steps = 0;
      result.final_loss = s.loss;
      if (r.ev.log) r.ev.log(s);
    }
    const bool eval_due = !stop && ((o.eval_every > 0 && step % o.eval_every == 0) || last);
    const bool checkpoint_due = (o.ckpt_every > 0 && step % o.ckpt_every == 0) || last || stop;
    // Checked where every rank checks, and before a state is evaluated or checkpointed.
    if (o.stop_on_nonfinite && (every_rank_logs || eval_due || checkpoint_due)) {
      stop_if_diverged(step, host_value(out.loss), host_value(out.grad_norm), last_checkpoint,
                       o.hyper.lr);
    }
    if (eval_due) {
      diag::TraceSpan eval_span(fmt::format("eval {}", step), "eval", {{"step", step}});
      result.final_eval = evaluate(r.model, eval_fn, state.params.tensors(), corpus.validation,
                                   o.eval_batches, step, r.share, !evaluated);
      evaluated = true;
      if (sink) {
        const auto writing = Clock::now();
        sink->eval(result.final_eval);
        leader_only += std::chrono::duration<double>(Clock::now() - writing).count();
      }
      if (r.ev.eval) r.ev.eval(result.final_eval);
    }
    // Replicated state is written once, by the leader.
    if (checkpoint_due) {
      if (r.share.leader) {
        const auto saving = Clock::now();
        save_checkpoint(r, state, loader, step);
        leader_only += std::chrono::duration<double>(Clock::now() - saving).count();
      }
      wait_for_leader(fmt::format("checkpoint of step {}", step));
      last_checkpoint = step;
    }
    result.last_step = step;
    if (stop) {
      result.stop_signal = stop;
      r.say(
          fmt::format("stopped after step {} of {} (signal {}); checkpoint step-{} holds it, and "
                      "--resume continues from there",
                      step, o.steps, stop, step));
      break;
    }
  }
  if (o.sample_bytes > 0 && !result.stop_signal && r.share.leader) {
    rt.jit().set_step(o.steps);
    diag::TraceSpan sample_span("sample", "sample", {{"bytes", o.sample_bytes}});
    result.sample = sample_text(r.model, state.params.tensors(), o.prompt, o.sample_bytes, o.seed);
  }
  if (o.sample_bytes > 0 && !result.stop_signal) wait_for_leader("sampling");

  // Phase 6: the run record and the calibration the next launch reads.
  figures.predicted_peak_bytes = predicted_peak(rt, runner, r.model, r.o.accum);
  figures.observed_peak_bytes = backend::host_memory_stats().peak_bytes_in_use;
  figures.calibration_file = calibration.file;
  figures.calibration_id = calibration.config_id;
  result.record_path = write_run_record(rt, o, result, figures, r.share.leader);
  if (r.share.leader) {
    append_calibration(calibration.file, {calibration.config_id, figures.predicted_peak_bytes,
                                          figures.observed_peak_bytes});
  }
  try {
    write_run_trace(o.run_dir, r.share.leader, true);
  } catch (const std::exception& e) {
    r.say(fmt::format("[trace] not written: {}", e.what()));  // the run itself succeeded
  }
  if (r.share.leader) result.report_path = write_report(o.run_dir, r, "");
  return result;
}

// A failed job leaves its timeline and a report of what there is; peers may be gone, so nothing
// is gathered.
void leave_failed_run(Runtime& rt, const TrainOptions& o, const TrainEvents& ev) {
  std::error_code ec;  // the run may have failed on this very path
  if (!data_share(rt).leader || !fs::is_directory(o.run_dir, ec)) return;
  try {
    write_run_trace(o.run_dir, true, false);
  } catch (const std::exception&) {
  }
  const TrainEvents events = ev;
  write_report(o.run_dir, Run{rt, o, events, o.model, 0, data_share(rt)}, "of the failed run ");
}

}  // namespace

TrainResult run_training(Runtime& rt, const TrainOptions& o, const TrainEvents& ev) {
  start_run_trace(rt);
  StartUp startup{o.resume ? 0 : 1};  // a resume's first step is known once its checkpoint is
  try {
    return train_phases(rt, o, ev, startup);
  } catch (const Stopped& e) {
    // What a stop request cut short (a compile) is the stop, not a failure.
    if (const int signal = startup.stepping ? 0 : stop_before_steps(rt)) {
      return stopped_before_steps(data_share(rt).leader ? ev : TrainEvents{}, signal,
                                  startup.first_step, e.what());
    }
    leave_failed_run(rt, o, ev);
    throw;
  } catch (const InputError&) {
    throw;  // bad input (a resume that does not match, say) leaves the run directory as it was
  } catch (...) {
    leave_failed_run(rt, o, ev);
    throw;
  }
}

}  // namespace keel::train
