// The phases of one training run (training.h): each reads and writes the run's Context.
#include "train/training.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "diag/run_report.h"
#include "diag/timeline.h"
#include "dist/communicator.h"
#include "dist/deadline.h"
#include "files/memory_limit.h"
#include "files/process_clock.h"
#include "ir/error.h"
#include "ir/version.h"
#include "nn/layer_stack.h"
#include "nn/tensor_parallel.h"
#include "policy/schema.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/laid_out_model.h"
#include "train/model_shards.h"
#include "train/run_timeline.h"
#include "train/sampler.h"
#include "train/stop_request.h"

namespace keel::train {
namespace fs = std::filesystem;

// The run's context: what every phase reads.
struct TrainingRun {
  Runtime& rt;
  const TrainOptions& o;
  const TrainEvents& ev;  // the caller's on the leader; none on the other processes
  nn::GptConfig model;    // its layout is launch.layer_layout's
  DataShare share;        // this process's part of the data axis
  void say(const std::string& line) const {
    if (ev.message) ev.message(line);
  }
  int64_t global_accum() const { return o.accum * share.ranks; }
};

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
  if (o.indexer_warmup < 0) throw bad("--indexer-warmup must be >= 0");
  if (o.indexer_warmup > 0 && o.model.sparse_attention_layer_ids.empty()) {
    throw bad(fmt::format(
        "--indexer-warmup {}: model '{}' has no sparse attention layer whose indexer it would "
        "train; give --indexer-warmup 0 or a model with sparse_attention_layers",
        o.indexer_warmup, o.model.name));
  }
  if (!(o.indexer_warmup_lr > 0) || !std::isfinite(o.indexer_warmup_lr)) {
    throw bad(fmt::format("--indexer-warmup-lr {} is not a learning rate; give a finite number > 0",
                          o.indexer_warmup_lr));
  }
}

std::vector<Tensor> fields_of(const data::Batch& b) {
  std::vector<Tensor> out;
  for (Array& a : b.fields()) out.emplace_back(std::move(a));
  return out;
}

data::Corpus load_data(const TrainingRun& r) {
  diag::TimelineSpan span("data", "data", {{"what", "corpus"}});
  std::vector<std::string> paths = r.o.data;
  if (paths.empty()) paths = {data::default_corpus_dir()};
  data::Corpus corpus = data::load_corpus(paths);
  for (const std::string& note : corpus.notes) r.say(note);
  r.say(
      fmt::format("data: {} ({} training documents, {:.1f} MB; {} validation documents, {:.0f} KB)",
                  fmt::join(paths, ", "), corpus.train.size(), corpus.train_bytes() / 1e6,
                  corpus.validation.size(), corpus.validation_bytes() / 1e3));
  return corpus;
}

// The rules that split something, in the calibration id: heads and mlp together are the default
// and add nothing (the words the ids were first written with); a rule without heads or mlp
// beside it says "alone" once, so every set of rules has its own words.
std::string split_words(const nn::GptConfig& model) {
  if (model.model_parallel == 1) return "";
  std::string out;
  if (model.split_heads != model.split_mlp)
    out += model.split_heads ? " split heads" : " split mlp";
  const bool blocks = model.split_heads || model.split_mlp;
  if (model.split_memory) out += blocks ? " split memory" : " split memory alone";
  if (model.split_experts)
    out += blocks || model.split_memory ? " split experts" : " split experts alone";
  if (model.split_vocab) {
    out +=
        blocks || model.split_memory || model.split_experts ? " split vocab" : " split vocab alone";
  }
  return out;
}

// Phase 2: the memory this config needed last time, checked against the budget before any
// compile. Barriers and scan change what is held at the peak, so they are part of the config.
CalibrationTarget check_calibration(const TrainingRun& r) {
  // The id keeps the words it was first written with (barrier_every_n_layers, scan_layers), so a
  // config's history carries over.
  const std::string text =
      r.model.to_json() + fmt::format(" accum {}", r.o.accum) +
      (r.share.ranks > 1 ? fmt::format(" ranks {}", r.share.ranks) : std::string()) +
      (r.model.layout.split_every > 0
           ? fmt::format(" barrier_every_n_layers {}", r.model.layout.split_every)
           : std::string()) +
      (r.model.layout.scanned ? " scan_layers" : "") +
      (r.model.remat_layers ? " remat_layers" : "") +
      (r.rt.policy().integer("sharding.zero") > 0
           ? fmt::format(" zero {}", r.rt.policy().integer("sharding.zero"))
           : std::string()) +
      (r.model.model_parallel > 1 ? fmt::format(" model {}", r.model.model_parallel)
                                  : std::string()) +
      split_words(r.model) + (r.model.experts_over_data ? " experts over data" : "") +
      (r.model.remat_policy != RematPolicy::nothing_saveable
           ? fmt::format(" {}", remat_policy_name(r.model.remat_policy))
           : std::string()) +
      // The warm-up's program (dense attention, every key) may hold more at its peak.
      (r.o.indexer_warmup > 0 && !r.o.resume ? " indexer_warmup" : "");
  // The host's memory, or the launch's budget for it when that is lower.
  files::MemoryLimit limit = files::memory_limit();
  limit.source = "this host's memory: " + limit.source;
  const int64_t budget = r.rt.policy().integer("launch.memory_budget_bytes");
  if (budget > 0 && (limit.bytes <= 0 || budget < limit.bytes)) {
    limit = {budget, "launch.memory_budget_bytes"};
  }
  // Arithmetic on the count alone: start() checks that the processes divide each tensor. A
  // process holds 1/M of each tensor the blocks split over "model".
  const StateShards s =
      StateShards::at_stage(r.rt.policy().integer("sharding.zero"), r.share.ranks);
  double n = 0;  // elements of the parameters this process holds before ZeRO splits them
  for (const auto& [name, t] : stored_types(r.model, false)) n += double(numel(t.shape));
  check_state_fits(r.model.name, nn::gpt_param_count(r.model),
                   static_cast<int64_t>(4 * n / static_cast<double>(s.parameters) +
                                        4 * n / static_cast<double>(s.gradients) +
                                        8 * n / static_cast<double>(s.moments)),
                   dist::processes_on_this_host(), limit.bytes, limit.source);
  CalibrationTarget target = calibration_target(r.rt, r.o.run_dir, text);
  check_memory_budget(read_calibration(target.file, target.config_id),
                      r.rt.policy().integer("launch.memory_budget_bytes"), target.file,
                      dist::processes_on_this_host());
  return target;
}

// The step's layout in one line each: the split, and the scan plan of each distinct stack.
void describe_layout(const TrainingRun& r, const StepRunner& runner) {
  const SegmentedStep* split = runner.split();
  if (split) {
    r.say(fmt::format("step split at layer barriers every {} layers: {} segments, programs {}",
                      r.model.layout.split_every, split->segments().size(),
                      fmt::join(split->program_names(), ", ")));
  }
  if (!r.model.layout.scanned) return;
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
  // Every figure's copy starts before the first is waited for: the transfers overlap.
  const Counters counters = model.moe_layers() > 0 ? state.counters.tensors() : Counters{};
  start_host_copies({out.loss, out.lr, out.grad_norm});
  start_host_copies(out.metrics);
  start_host_copies(counters);
  StepLog s;
  s.loss = host_value(out.loss);
  s.lr = host_value(out.lr);
  s.grad_norm = host_value(out.grad_norm);
  for (int64_t d = 1; d <= model.mtp_depth(); ++d) {
    s.mtp_loss.push_back(host_value(out.metrics.at(mtp_loss_key(d))));
  }
  if (!model.sparse_attention_layer_ids.empty()) {
    s.indexer_kl = host_value(out.metrics.at("indexer_kl"));
  }
  if (model.moe_layers() == 0) return s;
  s.moe_aux_loss = out.metrics.at("moe.aux_loss").item();
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

void save_checkpoint(const TrainingRun& r, const TrainState& state, const data::Loader& loader,
                     int64_t step) {
  diag::TimelineSpan span(fmt::format("checkpoint {}", step), "checkpoint", {{"step", step}});
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
std::string write_report(const std::string& run_dir, const TrainingRun& r, const char* what) {
  try {
    const std::string path = diag::write_run_report(run_dir);
    r.say(fmt::format("report {}{}", what, path));
    return path;
  } catch (const std::exception& e) {
    r.say(fmt::format("[report] not written: {}", e.what()));
    return "";
  }
}

// Whether this process samples: the leader alone when it holds the parameters whole; split,
// every process, each from what it holds (its slices and shards, gathered inside the program, so
// no process holds the whole parameters outside a program). Every process, not the leader's
// group over "model" alone: a program that exchanges data is agreed on by the whole launch.
bool takes_part_in_sample(const TrainState& state, const nn::GptConfig& model,
                          const DataShare& share) {
  return share.leader || state.shards.parameters > 1 || model.model_parallel > 1;
}

// The whole types of the parameters' slices over "data" (ZeRO stage 3), else none.
std::map<std::string, TensorType> sliced_parameters(const TrainState& state,
                                                    const nn::GptConfig& model) {
  return state.shards.parameters > 1 ? stored_types(model, state.stacked)
                                     : std::map<std::string, TensorType>{};
}

// The planner's peak: the largest program's, or the split step with what the host holds.
int64_t predicted_peak(Runtime& rt, const StepRunner& runner, const nn::GptConfig& model,
                       int64_t micro_batches, int64_t data_processes) {
  int64_t predicted = rt.jit().predicted_peak_bytes();
  if (const SegmentedStep* split = runner.split()) {
    ProgramMemoryMap memory;
    for (const auto& [name, pm] : rt.jit().program_memory()) {
      memory[name] = {pm.peak_bytes, pm.input_bytes};
    }
    predicted = std::max(predicted, split->predicted_peak_bytes(memory, model.batch, model.seq,
                                                                micro_batches, data_processes));
  }
  return predicted;
}

}  // namespace

struct Training::Context {
  Context(Runtime& rt, const TrainOptions& o, const TrainEvents& ev, DataShare share)
      : events(share.leader ? ev : TrainEvents{}),  // only the leader reports
        r{rt, o, events, laid_out_model(rt, o.model), share} {}
  TrainEvents events;
  TrainingRun r;
  data::Corpus corpus;
  CalibrationTarget calibration;
  std::optional<StepRunner> runner;
  std::optional<StepRunner> warmup_runner;  // the indexer warm-up's, when this run does one
  std::optional<Start> start;  // the state the steps update, and where its data resumes
  std::optional<data::Loader> loader;
  std::optional<EvalFn> eval_fn;
  std::optional<MetricsSink> sink;  // the leader's metrics.jsonl, open once steps begin
  std::optional<StepResult> last_out;
  int64_t checked_step = 0;  // the newest step whose loss was checked to be finite
};

Training::Training(Runtime& rt, const TrainOptions& o, const TrainEvents& ev)
    : host_reads_at_start_(host_read_count()) {
  validate(o);
  c_ = std::make_unique<Context>(rt, o, ev, data_share(rt));
  const TrainingRun& r = c_->r;
  if (rt.mesh().size() > 1 && rt.mesh().axis_size(kDataAxis) == 0) {
    throw InputError(fmt::format(
        "[train] the mesh {} has {} devices but no axis '{}', which keel train splits the batch "
        "over; name one of spmd.mesh_axes 'data'",
        rt.mesh().str(), rt.mesh().size(), kDataAxis));
  }
  for (const std::string& axis : rt.mesh().axes) {  // never a silent copy of the same work
    if (axis == kDataAxis || axis == nn::kModelAxis || rt.mesh().axis_size(axis) == 1) continue;
    throw InputError(fmt::format(
        "[train] the mesh {} splits axis '{}' over {} devices, but keel train splits the batch "
        "over '{}' and the blocks over '{}' only: the processes of '{}' would repeat each "
        "other's work; give '{}' size 1 or leave it out of spmd.mesh_axes",
        rt.mesh().str(), axis, rt.mesh().axis_size(axis), kDataAxis, nn::kModelAxis, axis, axis));
  }
  if ((r.share.ranks & (r.share.ranks - 1)) != 0 && o.accum > 1) {
    r.say(fmt::format(
        "data parallel over {} processes with --accum {}: results match one process with "
        "--accum {} only to rounding (bit for bit needs a power-of-two process count or "
        "--accum 1; dist/fixed_order.h)",
        r.share.ranks, o.accum, r.global_accum()));
  }
  if (o.indexer_warmup > 0 && !o.resume && r.model.layout.split_every > 0) {
    throw InputError(fmt::format(
        "[train] --indexer-warmup {} with launch.layer_layout {}: the warm-up runs as one "
        "program, and a split step's is not built; give launch.layer_layout unrolled or scanned",
        o.indexer_warmup, rt.policy().string("launch.layer_layout")));
  }
  c_->corpus = load_data(r);
}

Training::~Training() {
  // The JIT logs compiles at the training step while the run lasts, then at each function's
  // own calls again.
  if (c_) c_->r.rt.jit().set_step(-1);
}

void Training::say(const std::string& line) const {
  c_->r.say(line);
}

void Training::start() {
  const TrainingRun& r = c_->r;
  fs::create_directories(r.o.run_dir);
  c_->calibration = check_calibration(r);
  // sharding.zero = 1: AdamW's moments split over the data axis's processes; 2: the gradients
  // reduce-scattered into the same slices; 3: the parameters held as slices too.
  const int64_t zero = r.rt.policy().integer("sharding.zero");
  const StateShards shards = StateShards::at_stage(zero, r.share.ranks);
  // A scanned stack in one program (StepRunner splits the step when split_every > 0) keeps its
  // layers' tensors stacked, so the update, like the blocks, does not grow with depth.
  const bool stacked = r.model.layout.scanned && r.model.layout.split_every == 0;
  const std::map<std::string, TensorType> types = stored_types(r.model, stacked);
  StepOptions step_options;
  step_options.split_moments = shards.moments > 1;
  step_options.split_gradients = shards.gradients > 1;
  if (shards.parameters > 1) step_options.split_parameters = types;
  c_->runner.emplace(r.model, step_options);
  describe_layout(r, *c_->runner);
  if (shards.gradients > 1) check_gradient_slices(types, shards.gradients);
  c_->start.emplace(start_run(r.o, r.rt, r.model, stacked, r.ev, r.global_accum(), shards));
  // The init's whole draws of one tensor at a time left buffers the backend would keep for
  // sizes no step asks for.
  if (shards.parameters > 1 || r.model.model_parallel > 1) r.rt.release_cached_memory();
  figures_.state_layout = state_layout(r.model, c_->start->state.stacked, shards);
  figures_.state = state_bytes(r.model, c_->start->state.stacked, shards);
  figures_.zero = zero;
  figures_.data_processes = r.share.ranks;
  figures_.model_processes = r.model.model_parallel;
  if (shards.moments > 1) {
    int64_t here = 0, whole = 0;  // whole: the global tensors', split over "model" or not
    for (const auto& [name, t] : c_->start->state.m.tensors()) here += 2 * t.type().bytes();
    for (const StateTensorLayout& t : figures_.state_layout) whole += 2 * t.type.bytes();
    const char* also = shards.parameters > 1  ? ", the reduced gradients and the parameters"
                       : shards.gradients > 1 ? " and the reduced gradients"
                                              : "";
    r.say(fmt::format(
        "sharding: zero {}, AdamW's moments{} split over {} processes of 'data': {:.1f} MB of "
        "moments in each, {:.1f} MB whole",
        zero, also, shards.moments, static_cast<double>(here) / 1e6,
        static_cast<double>(whole) / 1e6));
  }
  if (r.model.experts_over_data) {
    r.say(fmt::format(
        "sharding: experts over 'data': each of the {} processes runs {} of every MoE layer's {} "
        "experts, the tokens sent to them and back by all_to_all",
        r.share.ranks, r.model.moe.experts / r.share.ranks, r.model.moe.experts));
  }
  first_step_ = c_->start->first_step;
  result_.first_step = first_step_;
  last_checkpoint_ = first_step_ - 1;
  data::LoaderConfig lc;
  lc.micro_batches = r.global_accum();  // the global batch; this process takes its share
  lc.batch = r.model.batch;
  lc.seq = r.model.seq;
  lc.fim_rate = r.o.fim_rate;
  lc.seed = r.o.seed;
  c_->loader.emplace(c_->corpus.train, lc, c_->start->cursor);
  c_->eval_fn.emplace(make_eval_step(r.model, step_options.split_parameters));
  if (r.o.indexer_warmup > 0) {
    if (first_step_ > 1) {
      say(
          fmt::format("indexer warm-up: skipped on resume (it runs before step 1 of a new "
                      "run; step-{} holds whatever indexers the run has)",
                      first_step_ - 1));
    } else {
      StepOptions warmup = step_options;
      warmup.indexer_warmup = true;
      c_->warmup_runner.emplace(r.model, warmup);
    }
  }
}

const TrainState& Training::state() const {
  return c_->start->state;
}

void Training::warm_up_indexers() {
  if (!c_->warmup_runner) return;
  const TrainingRun& r = c_->r;
  TrainState& state = c_->start->state;
  Hyper h = r.o.hyper;  // a constant learning rate: no warm-up ramp, a cosine that ends where it
  h.lr = r.o.indexer_warmup_lr;  // starts
  h.warmup_steps = 0;
  h.total_steps = static_cast<double>(r.o.indexer_warmup);
  h.min_lr_ratio = 1;
  // The training data's first batches: the frozen model reads them again from step 1.
  data::Loader loader(c_->corpus.train, c_->loader->config());
  const int64_t n = r.o.indexer_warmup;
  for (int64_t w = 1; w <= n; ++w) {
    const std::vector<Tensor> batch = share_of(loader.next(), r.share, r.o.accum);
    const StepResult out = c_->warmup_runner->run(state, batch, step_scalars(h, w));
    // One process stops before step 1, with nothing to checkpoint; processes under a launcher
    // warm up to the end and agree on a stop after step 1, as after any step.
    if (r.rt.place().size == 1 && stop_requested() != 0) {
      say(fmt::format("indexer warm-up: stopped at {}/{}", w, n));
      return;
    }
    if (w != 1 && w != n && w % r.o.log_every != 0) continue;
    const Tensor& kl = out.metrics.at("indexer_kl");
    start_host_copies({kl, out.loss});
    const double kl_here = host_value(kl);
    if (r.o.stop_on_nonfinite && !std::isfinite(kl_here)) {
      throw Error(fmt::format(
          "[train] indexer warm-up step {}: indexer_kl is {}; the indexers diverged before step "
          "1, so lower --indexer-warmup-lr ({}) or pass --on-nonfinite continue",
          w, kl_here, r.o.indexer_warmup_lr));
    }
    if (w == 1) figures_.indexer_warmup.first_kl = kl_here;
    figures_.indexer_warmup.last_kl = kl_here;
    say(fmt::format("indexer warm-up {}/{}: indexer_kl {:.5g} (dense attention, loss {:.4f})", w, n,
                    kl_here, host_value(out.loss)));
  }
  figures_.indexer_warmup.steps = n;
  // The training's AdamW counts its steps from 1: moments carried over would be scaled up by
  // its bias correction as if they were one step old.
  NamedTensors m = state.m.tensors(), v = state.v.tensors();
  for (NamedTensors* moments : {&m, &v}) {
    for (auto& [name, t] : *moments) {
      if (is_indexer_parameter(name)) t = Tensor(Array::full(t.shape(), 0.0, t.dtype()));
    }
  }
  state.m.assign(m);
  state.v.assign(v);
  c_->warmup_runner.reset();
}

void Training::prepare_programs() {
  const TrainingRun& r = c_->r;
  TrainState& state = c_->start->state;
  const std::vector<Tensor> empty =
      fields_of(data::empty_batch(r.o.accum, r.model.batch, r.model.seq));
  c_->runner->prepare(state, empty, step_scalars(r.o.hyper, first_step_));
  if (c_->warmup_runner) c_->warmup_runner->prepare(state, empty, step_scalars(r.o.hyper, 1));
  // Evaluation and the final sample too: every program the run needs exists before step 1, so
  // the programs curve is flat from there and a sealed cache that lacks one stops the run now.
  c_->eval_fn->prepare(state.params.tensors(),
                       fields_of(data::empty_batch(1, r.model.batch, r.model.seq)));
  if (r.o.sample_bytes > 0 && takes_part_in_sample(state, r.model, r.share)) {
    prepare_sampler(r.model, state.params.tensors(), sliced_parameters(state, r.model));
  }
  figures_.time_to_first_step_s = files::seconds_since_process_start();
  figures_.tokens_per_step = double(r.global_accum() * r.model.batch * r.model.seq);
  say(fmt::format("first step after {:.2f} s (runtime, data, trace, compile or load)",
                  figures_.time_to_first_step_s));
}

StepDone Training::step(int64_t step) {
  const TrainingRun& r = c_->r;
  const TrainOptions& o = r.o;
  if (!c_->sink && r.share.leader) {  // the first step: a resume drops what came after it
    if (o.resume) {
      if (const int64_t n = drop_metrics_after(o.run_dir, first_step_ - 1); n > 0) {
        say(
            fmt::format("metrics: dropped {} lines after step {} (the run that went past the "
                        "checkpoint); metrics.jsonl holds each step once",
                        n, first_step_ - 1));
      }
    }
    c_->sink.emplace(o.run_dir);
  }
  if (step == first_step_) {
    said_at_ = std::chrono::steady_clock::now();
    waited_at_ = dist::collective_wait_seconds();
  }
  r.rt.jit().set_step(step);
  std::optional<diag::TimelineSpan> fetch(std::in_place, "batch", "data",
                                          nlohmann::json{{"step", step}});
  const std::vector<Tensor> batch = share_of(c_->loader->next(), r.share, o.accum);
  fetch.reset();
  const int64_t compiles_before = r.rt.jit().log().totals().compiles;
  const auto t0 = Clock::now();
  StepDone done;
  done.step = step;
  {
    diag::TimelineSpan span(fmt::format("dispatch step {}", step), "dispatch",
                            nlohmann::json{{"step", step}});
    done.out = c_->runner->run(c_->start->state, batch, step_scalars(o.hyper, step));
  }
  running_.push_back({step, t0, Clock::now(), r.rt.after_dispatched()});
  settle_steps(false);
  ++counted_steps_;
  if (r.ev.tick) r.ev.tick(step, o.steps);
  done.compiled = r.rt.jit().log().totals().compiles != compiles_before;
  const bool last = step == o.steps;
  // A stop request (SIGTERM, Ctrl-C) ends the run after this step, logged and checkpointed.
  const auto now = Clock::now();
  const double waited = dist::collective_wait_seconds();
  const double busy = std::chrono::duration<double>(now - said_at_).count() -
                      (waited - waited_at_) - leader_only_s_;
  said_at_ = now;
  waited_at_ = waited;
  leader_only_s_ = 0;
  const AfterStep said = agree_after_step(last ? 0 : stop_requested(), busy, step);
  done.stop = said.stop;
  window_busy_.resize(said.busy_s.size(), 0.0);
  for (size_t k = 0; k < said.busy_s.size(); ++k) window_busy_[k] += said.busy_s[k];
  // `compiled` is a rank's own; the other reasons to log are the same on every rank.
  done.every_rank_logs = step % o.log_every == 0 || last || step == first_step_ || done.stop;
  done.logs = done.every_rank_logs || done.compiled;
  done.evaluates = !done.stop && ((o.eval_every > 0 && step % o.eval_every == 0) || last);
  done.checkpoints = (o.ckpt_every > 0 && step % o.ckpt_every == 0) || last || done.stop;
  c_->last_out = done.out;
  result_.last_step = step;
  return done;
}

void Training::check_finite(int64_t step) {
  // Checked where every rank checks, and before a state is evaluated or checkpointed.
  if (!c_->r.o.stop_on_nonfinite || !c_->last_out || c_->checked_step == step) return;
  c_->checked_step = step;
  start_host_copies({c_->last_out->loss, c_->last_out->grad_norm});
  stop_if_diverged(step, host_value(c_->last_out->loss), host_value(c_->last_out->grad_norm),
                   last_checkpoint_, c_->r.o.hyper.lr);
}

void Training::settle_steps(bool wait) {
  diag::Timeline& timeline = diag::Timeline::process();
  while (!running_.empty()) {
    RunningStep& s = running_.front();
    if (!wait && !s.finished.done()) return;
    s.finished.wait();  // a failed program's error ends the run here
    // A backend that runs programs before its call returns gives an event done at birth.
    const auto finished = std::max(s.finished.completed_at(), s.returned);
    const auto began = std::max(s.called, last_finished_);
    last_finished_ = finished;
    const double seconds = std::chrono::duration<double>(finished - began).count();
    if (s.step > first_step_) figures_.step_seconds.push_back(seconds);
    window_s_ += seconds;
    ++window_steps_;
    if (timeline.enabled()) {
      const double end_us =
          timeline.now_us() - 1e6 * std::chrono::duration<double>(Clock::now() - finished).count();
      timeline.complete_on("device", fmt::format("step {}", s.step), "step", end_us - 1e6 * seconds,
                           end_us, nlohmann::json{{"step", s.step}});
    }
    running_.pop_front();
  }
}

void Training::log_window(const StepDone& done) {
  if (!done.logs) return;
  settle_steps(true);
  const TrainingRun& r = c_->r;
  StepLog s =
      read_log_point(r.model, done.out, c_->start->state, counted_steps_, figures_.tokens_per_step);
  s.step = done.step;
  s.total = r.o.steps;
  s.ms = 1000.0 * window_s_ / double(window_steps_);
  s.tokens_per_s = figures_.tokens_per_step * double(window_steps_) / std::max(window_s_, 1e-9);
  s.compiled = done.compiled;
  for (double& b : window_busy_) {
    s.rank_busy_ms.push_back(1000.0 * b / double(window_steps_));
    b = 0;
  }
  if (c_->sink) {  // the leader's own writes (fsynced), which the others wait out
    const auto writing = Clock::now();
    c_->sink->step(s, r.model.moe_layers() > 0, counted_steps_);
    leader_only_s_ += std::chrono::duration<double>(Clock::now() - writing).count();
  }
  if (r.model.moe_layers() > 0) {
    c_->start->state.counters.assign(zero_counters(r.model));  // a new window, same buffers
    counted_steps_ = 0;
  }
  window_s_ = 0;
  window_steps_ = 0;
  result_.final_loss = s.loss;
  if (r.ev.log) r.ev.log(s);
  if (done.every_rank_logs) check_finite(done.step);
}

void Training::evaluate(int64_t step) {
  check_finite(step);
  const TrainingRun& r = c_->r;
  diag::TimelineSpan eval_span(fmt::format("eval {}", step), "eval", {{"step", step}});
  result_.final_eval = train::evaluate(r.model, *c_->eval_fn, c_->start->state.params.tensors(),
                                       c_->corpus.validation, r.o.eval_batches, step, r.share,
                                       !evaluated_, c_->start->state.shards.parameters > 1);
  evaluated_ = true;
  if (c_->sink) {
    const auto writing = Clock::now();
    c_->sink->eval(result_.final_eval);
    leader_only_s_ += std::chrono::duration<double>(Clock::now() - writing).count();
  }
  if (r.ev.eval) r.ev.eval(result_.final_eval);
}

void Training::checkpoint(int64_t step) {
  check_finite(step);
  // The state is written once, by the leader; split parts are sent to it meanwhile.
  if (c_->r.share.leader) {
    const auto saving = Clock::now();
    save_checkpoint(c_->r, c_->start->state, *c_->loader, step);
    leader_only_s_ += std::chrono::duration<double>(Clock::now() - saving).count();
  } else {
    send_moments_for_checkpoint(c_->start->state, c_->r.model);
  }
  wait_for_leader(fmt::format("checkpoint of step {}", step));
  last_checkpoint_ = step;
}

void Training::stopped_after(int64_t step, int signal) {
  result_.stop_signal = signal;
  say(
      fmt::format("stopped after step {} of {} (signal {}); checkpoint step-{} holds it, and "
                  "--resume continues from there",
                  step, c_->r.o.steps, signal, step));
}

void Training::sample() {
  const TrainingRun& r = c_->r;
  if (r.o.sample_bytes <= 0 || result_.stop_signal) return;
  const TrainState& state = c_->start->state;
  if (takes_part_in_sample(state, r.model, r.share)) {
    r.rt.jit().set_step(r.o.steps);
    diag::TimelineSpan sample_span("sample", "sample", {{"bytes", r.o.sample_bytes}});
    const std::string text =
        sample_text(r.model, state.params.tensors(), r.o.prompt, r.o.sample_bytes, r.o.seed,
                    kDefaultTemperature, sliced_parameters(state, r.model));
    if (r.share.leader) result_.sample = text;
  }
  wait_for_leader("sampling");
}

void Training::count_host_reads(const StepDone& done, int64_t reads, int64_t lone) {
  HostReads& h = figures_.host_reads;
  if (done.logs || done.evaluates || done.checkpoints) {
    ++h.reporting_steps;
    h.in_reporting_steps += reads;
    h.lone_in_reporting_steps += lone;
  } else {
    ++h.quiet_steps;
    h.in_quiet_steps += reads;
  }
}

TrainResult Training::finish() {
  settle_steps(true);
  const TrainingRun& r = c_->r;
  figures_.host_reads.total = host_read_count() - host_reads_at_start_;
  figures_.predicted_peak_bytes =
      predicted_peak(r.rt, *c_->runner, r.model, r.o.accum, r.share.ranks);

  figures_.observed_peak_bytes = r.rt.memory_stats().peak_bytes_in_use;
  const TrainState& state = c_->start->state;
  figures_.held = {};
  for (const nn::Variables* vars : {&state.params, &state.m, &state.v}) {
    int64_t& bytes = vars == &state.params ? figures_.held.parameters : figures_.held.optimizer;
    for (const auto& [name, t] : vars->tensors()) bytes += t.type().bytes();
  }
  figures_.calibration_file = c_->calibration.file;
  figures_.calibration_id = c_->calibration.config_id;
  result_.record_path = write_run_record(r.rt, r.o, result_, figures_, r.share.leader);
  if (r.share.leader) {
    append_calibration(
        c_->calibration.file,
        {c_->calibration.config_id, figures_.predicted_peak_bytes, figures_.observed_peak_bytes});
  }
  try {
    write_run_timeline(r.o.run_dir, r.share.leader, true);
  } catch (const std::exception& e) {
    say(fmt::format("[timeline] trace.json not written: {}",
                    e.what()));  // the run itself succeeded
  }
  if (r.share.leader) result_.report_path = write_report(r.o.run_dir, r, "");
  return result_;
}

void leave_failed_run(Runtime& rt, const TrainOptions& o, const TrainEvents& ev) {
  std::error_code ec;  // the run may have failed on this very path
  if (!data_share(rt).leader || !fs::is_directory(o.run_dir, ec)) return;
  try {
    write_run_timeline(o.run_dir, true, false);
  } catch (const std::exception&) {
  }
  const TrainEvents events = ev;
  write_report(o.run_dir, TrainingRun{rt, o, events, o.model, data_share(rt)},
               "of the failed run ");
}

}  // namespace keel::train
