// keel train (the main job) and keel sample: wiring and terminal output; the trainer lives in
// train/.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "data/batch.h"
#include "data/corpus.h"
#include "data/corpus_files.h"
#include "dist/communicator.h"
#include "dist/deadline.h"
#include "files/process.h"
#include "files/read.h"
#include "ir/error.h"
#include "runtime/runtime.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/evaluate.h"
#include "train/gpt_step.h"
#include "train/run_dir_claim.h"
#include "train/sampler.h"
#include "train/stop_request.h"
#include "train/trainer.h"
#include "train/trainer_json.h"

namespace keel::cli {
namespace {

constexpr int64_t kMaxConfigBytes = 4 << 20;  // a model config is a few hundred bytes

struct TrainArgs {
  std::string preset = "code-s";
  std::string config;
  int64_t batch = 0, seq = 0;  // 0: the preset's
  int64_t seed = -1;           // -1: launch.seed
  double warmup = -1;          // -1: a tenth of the schedule, at most 100
  int64_t total = 0;           // schedule length; 0: --steps
  std::string on_nonfinite = "stop";
  bool overwrite = false;  // replace an earlier run in --run-dir
  train::TrainOptions o;
};

// The progress bar is redrawn in place on a terminal; log lines are printed above it.
class Progress {
 public:
  // Only one process of a launch (the leader) prints. Under mpirun stdout is OpenMPI's pty
  // whatever mpirun's own output is, so a log file would fill with redrawn bars: no bar there.
  Progress(bool quiet, bool launched)
      : tty_(!quiet && !launched && ::isatty(STDOUT_FILENO) != 0), quiet_(quiet) {}
  // Output errors are ignored: a closed pipe (its reader gone) must not end a stopping run.
  void line(const std::string& text) {
    if (quiet_) return;
    clear();
    std::fputs((text + "\n").c_str(), stdout);
    std::fflush(stdout);
  }
  void tick(int64_t step, int64_t total) {
    if (!tty_) return;
    const int width = 30;
    int done = static_cast<int>(width * step / std::max<int64_t>(total, 1));
    std::fputs(fmt::format("\r[{}{}] step {}/{}", std::string(done, '#'),
                           std::string(width - done, '.'), step, total)
                   .c_str(),
               stdout);
    std::fflush(stdout);
    drawn_ = true;
  }

 private:
  void clear() {
    if (drawn_) std::fputs(fmt::format("\r{:60}\r", "").c_str(), stdout);
    drawn_ = false;
  }
  bool tty_;
  bool quiet_;
  bool drawn_ = false;
};

train::TrainOptions resolve_options(TrainArgs a, const policy::LaunchPolicy& launch) {
  train::TrainOptions& o = a.o;
  if (!a.config.empty()) {
    // The byte tokenizer's tokens: a smaller vocab would clamp them silently.
    o.model = nn::GptConfig::from_json(
        files::read_file(a.config, kMaxConfigBytes, "the model config (--config)"), a.config,
        data::kVocab);
  } else {
    o.model = nn::gpt_preset(a.preset);
  }
  if (a.batch > 0) o.model.batch = a.batch;
  if (a.seq > 0) {
    if (a.seq > o.model.seq) {
      throw InputError(
          fmt::format("[train] {} {} is longer than {} allows ({}); use at most {} or a --config "
                      "with a larger seq",
                      option_text("--seq-len", "KEEL_TRAIN_SEQ_LEN"), a.seq, o.model.name,
                      o.model.seq, o.model.seq));
    }
    o.model.seq = a.seq;
  }
  o.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed)
                       : static_cast<uint64_t>(launch.integer("launch.seed"));
  o.hyper.total_steps = static_cast<double>(a.total > 0 ? a.total : o.steps);
  if (!(a.warmup == -1 || (a.warmup >= 0 && a.warmup <= 1e7))) {
    throw InputError(fmt::format(
        "[train] {} {} is not a number of steps; give 0 to 1e7 steps, or -1 for a tenth "
        "of the schedule (at most 100)",
        option_text("--warmup", "KEEL_TRAIN_WARMUP"), a.warmup));
  }
  if (a.seed < -1) {
    throw InputError(
        fmt::format("[train] {} {} is negative; give a seed >= 0, or -1 for launch.seed",
                    option_text("--seed", "KEEL_TRAIN_SEED"), a.seed));
  }
  // A path that is not there is refused now; reading the corpus waits for the runtime.
  for (const std::string& path : o.data) data::list_corpus_files(path);
  o.stop_on_nonfinite = a.on_nonfinite == "stop";
  o.hyper.warmup_steps = a.warmup >= 0 ? a.warmup : std::min<double>(100, o.hyper.total_steps / 10);
  return o;
}

// The first SIGINT, SIGTERM or SIGUSR1 asks the trainer to stop after the step in flight, with a
// checkpoint (before the first step: at once); the handler then restores the default actions,
// so a second signal ends it at once.
char signal_note[192];  // formatted before any signal: a handler may not allocate
size_t signal_note_size = 0;
// SIGUSR1 too: mpirun forwards it to every rank and kills none (SIGTERM to mpirun kills them a
// second later), and batch systems send it ahead of a preemption (Slurm's --signal=USR1@120).
constexpr int kStopSignals[3] = {SIGINT, SIGTERM, SIGUSR1};
int caught_signals[3] = {0, 0, 0};  // those the handler took over (not an inherited SIG_IGN)
bool launched_run = false;          // set before the handler is installed

}  // namespace

void release_stop_signals() {
  struct sigaction plain = {};
  plain.sa_handler = SIG_DFL;
  for (int caught : caught_signals) {
    if (caught != 0) sigaction(caught, &plain, nullptr);
  }
}

namespace {

void on_stop_signal(int signal) {
  const int saved_errno = errno;
  train::request_stop(signal);
  // Alone and before the first step, a compile in flight is stopped with the run (the compiler
  // has a process group of its own, which the terminal's Ctrl-C does not reach); launched
  // processes agree on a step first.
  if (!launched_run && !train::steps_started()) files::interrupt_children();
  release_stop_signals();
  // A pipe reader in the same process group (`keel train | tee log`) dies of the same Ctrl-C;
  // writing to it must not end the run before its checkpoint.
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, nullptr);
  const ssize_t written = ::write(STDERR_FILENO, signal_note, signal_note_size);
  (void)written;  // nothing to do about a failed write in a handler
  errno = saved_errno;
}

// Under a launcher the note is left to the trainer: mpirun also sends SIGTERM when it tears a
// failed launch down, and a note then would promise a checkpoint that never comes.
void stop_after_the_step_on_signals(bool launched) {
  launched_run = launched;
  if (!launched) {
    const auto end = fmt::format_to_n(
        signal_note, sizeof signal_note - 1,
        "\nkeel: stopping after the step in flight, with a checkpoint (before the first step, "
        "without); a second signal ends it now\n");
    signal_note_size = std::min(end.size, sizeof signal_note - 1);
  }
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i : {0, 1, 2}) {
    const int signal = kStopSignals[i];
    struct sigaction before = {};
    sigaction(signal, nullptr, &before);
    if (before.sa_handler == SIG_IGN) continue;  // a background job's shell ignores SIGINT for it
    caught_signals[i] = signal;
    sigaction(signal, &action, nullptr);
  }
}

void run_train(const TrainArgs& args) {
  // Before the runtime opens its compile log there, the first process claims the run directory;
  // the others start once it has (--overwrite may remove their logs of an earlier run).
  // Bad options and profiles are refused before anything is written there.
  policy::LaunchPolicy launch = resolve_launch_policy();
  train::TrainOptions o = resolve_options(args, launch);
  const dist::ProcessPlace& here = dist::process_place();
  std::optional<train::RunDirClaim> claim;
  if (here.rank == 0) claim.emplace(args.o.run_dir, args.o.resume, args.overwrite);
  if (here.launched) {
    const dist::WaitScope wait("the run directory's claim", true);
    dist::world().barrier();
  }
  // The claim saw the first process's directory only: on a host whose run directory is its
  // own, a fresh run's log must not continue an earlier run's.
  if (here.rank > 0 && !args.o.resume) {
    std::error_code ec;
    std::filesystem::remove(
        std::filesystem::path(args.o.run_dir) / fmt::format("compiles.rank{}.jsonl", here.rank),
        ec);
  }
  Runtime runtime(std::move(launch), {args.o.run_dir, nullptr});
  stop_after_the_step_on_signals(runtime.place().launched);
  Progress progress(runtime.place().rank != 0, runtime.place().launched);
  const int64_t ranks = train::data_share(runtime).ranks;
  progress.line(fmt::format(
      "keel train: {} ({:.2f}M parameters), batch {}x{}x{} tokens{}, {} steps, lr {}, backend "
      "{}, profile {}, run dir {}",
      o.model.name, double(nn::gpt_param_count(o.model)) / 1e6, o.accum * ranks, o.model.batch,
      o.model.seq,
      ranks > 1 ? fmt::format(" ({} processes x --accum {}, {} threads each)", ranks, o.accum,
                              runtime.threads())
                : "",
      o.steps, o.hyper.lr, runtime.policy().string("launch.backend"),
      runtime.policy().string("launch.profile"), o.run_dir));
  if (claim && !claim->note().empty()) progress.line(claim->note());
  train::TrainEvents ev;
  ev.message = [&](const std::string& s) { progress.line(s); };
  ev.tick = [&](int64_t step, int64_t total) { progress.tick(step, total); };
  ev.log = [&](const train::StepLog& s) {
    progress.line(fmt::format(
        "step {:>5}/{}  loss {:.4f}  lr {:.2e}  gnorm {:.3f}  {:>6.0f} ms/step  {:>6.0f} tok/s{}{}",
        s.step, s.total, s.loss, s.lr, s.grad_norm, s.ms, s.tokens_per_s,
        s.compiled ? "  [compiled]" : "", train::straggler_note(s.rank_busy_ms)));
  };
  ev.eval = [&](const train::EvalLog& e) {
    progress.line(fmt::format("eval  {:>5}  validation loss {:.4f}  {:.3f} bits/byte", e.step,
                              e.loss, e.bits_per_byte));
  };
  train::TrainResult r = train::run_training(runtime, o, ev);
  diag::CompileTotals n = runtime.jit().log().totals();
  if (r.stop_signal != 0 && r.last_step < r.first_step) {
    progress.line(
        fmt::format("stopped by signal {} before the first step; compiles {}, disk loads {}",
                    r.stop_signal, n.compiles, n.disk_hits));
    set_clean_exit_code(128 + r.stop_signal);
    return;
  }
  if (r.stop_signal != 0) {
    progress.line(fmt::format(
        "stopped by signal {}: steps {}..{} of {}, train loss {:.4f}; compiles {}, disk loads {}; "
        "record {}",
        r.stop_signal, r.first_step, r.last_step, o.steps, r.final_loss, n.compiles, n.disk_hits,
        r.record_path));
    set_clean_exit_code(128 + r.stop_signal);  // as a process ended by the signal reports it
    return;
  }
  progress.line(fmt::format(
      "done: steps {}..{}, train loss {:.4f}, validation {:.3f} bits/byte; compiles {}, disk "
      "loads {}; record {}",
      r.first_step, r.last_step, r.final_loss, r.final_eval.bits_per_byte, n.compiles, n.disk_hits,
      r.record_path));
  if (const auto counted = runtime.jit().backend_counters(); !counted.empty()) {
    std::string line = "backend:";
    for (const auto& [name, n] : counted) line += fmt::format(" {} {}", name, n);
    progress.line(line);  // host_reads: the device read by the host, at log points only
  }
  if (!r.sample.empty() || o.sample_bytes > 0) {
    progress.line(fmt::format("sample:\n{}{}", o.prompt, r.sample));
  }
}

void add_train_options(CLI::App* cmd, TrainArgs& a) {
  train::TrainOptions& o = a.o;
  auto opt = [&](const char* name, auto& var, const char* help, const char* env) {
    return cmd->add_option(name, var, help)->capture_default_str()->envname(env);
  };
  opt("--preset", a.preset, "model preset: code-s, code-moe-s, nam-s, gpt2-s, gpt2-m",
      "KEEL_TRAIN_PRESET")
      ->check(CLI::IsMember(nn::gpt_preset_names()));
  opt("--config", a.config, "model config JSON (fields of a preset; overrides --preset)",
      "KEEL_TRAIN_CONFIG");
  opt("--steps", o.steps, "training steps", "KEEL_TRAIN_STEPS")->check(CLI::Range(1, 10000000));
  opt("--batch-size", a.batch, "rows per micro-batch (0: the preset's)", "KEEL_TRAIN_BATCH_SIZE")
      ->check(CLI::Range(0, 65536));
  opt("--seq-len", a.seq, "tokens per row (0: the preset's)", "KEEL_TRAIN_SEQ_LEN")
      ->check(CLI::Range(0, 65536));
  opt("--accum", o.accum, "micro-batches per step, inside the one program", "KEEL_TRAIN_ACCUM")
      ->check(CLI::Range(1, 1024));
  opt("--lr", o.hyper.lr, "peak learning rate (a device scalar)", "KEEL_TRAIN_LR");
  opt("--warmup", a.warmup, "warm-up steps (-1: a tenth of the schedule, at most 100)",
      "KEEL_TRAIN_WARMUP");
  opt("--init-from", o.init_from,
      "a checkpoint (step-N) or run directory whose parameters start the run (the model may add "
      "parameters: a dense model's into the same with sparse attention); moments and data "
      "start afresh",
      "KEEL_TRAIN_INIT_FROM");
  opt("--indexer-warmup", o.indexer_warmup,
      "DSA's dense warm-up: steps before step 1 that train only the sparse attention indexers, "
      "against dense attention over every causal key (0: none; a resume has done them)",
      "KEEL_TRAIN_INDEXER_WARMUP")
      ->check(CLI::Range(int64_t{0}, int64_t{10000000}));
  opt("--indexer-warmup-lr", o.indexer_warmup_lr,
      "the indexer warm-up's constant learning rate (DSA's: 1e-3)", "KEEL_TRAIN_INDEXER_WARMUP_LR");
  opt("--total-steps", a.total,
      "length of the cosine schedule (0: --steps); lets a run stop early and resume later",
      "KEEL_TRAIN_TOTAL_STEPS")
      ->check(CLI::Range(int64_t{0}, int64_t{10000000}));
  opt("--data", o.data, "files or directories of text (default: the libstdc++ headers)",
      "KEEL_TRAIN_DATA");
  opt("--run-dir", o.run_dir, "record.json, metrics.jsonl, tb/, checkpoints/",
      "KEEL_TRAIN_RUN_DIR");
  cmd->add_flag("--resume", o.resume, "continue from the newest complete checkpoint in --run-dir")
      ->envname("KEEL_TRAIN_RESUME");
  cmd->add_flag("--overwrite", a.overwrite,
                "replace an earlier run in --run-dir, moving its files (checkpoints, metrics, "
                "events, records) into RUN_DIR/previous; without it a fresh run there is refused")
      ->envname("KEEL_TRAIN_OVERWRITE");
  opt("--eval-every", o.eval_every, "steps between evaluations (0: at the end only)",
      "KEEL_TRAIN_EVAL_EVERY");
  opt("--eval-batches", o.eval_batches, "validation batches per evaluation",
      "KEEL_TRAIN_EVAL_BATCHES")
      ->check(CLI::Range(1, 100000));
  opt("--ckpt-every", o.ckpt_every, "steps between checkpoints (0: at the end only)",
      "KEEL_TRAIN_CKPT_EVERY");
  opt("--keep", o.keep, "checkpoints kept", "KEEL_TRAIN_KEEP")->check(CLI::Range(1, 1000));
  opt("--log-every", o.log_every, "steps between log lines", "KEEL_TRAIN_LOG_EVERY")
      ->check(CLI::Range(1, 1000000));
  opt("--seed", a.seed, "seed for initialisation and data (-1: launch.seed)", "KEEL_TRAIN_SEED");
  opt("--fim-rate", o.fim_rate, "fraction of documents as fill-in-the-middle examples",
      "KEEL_TRAIN_FIM_RATE")
      ->check(CLI::Range(0.0, 1.0));
  opt("--sample-bytes", o.sample_bytes, "bytes to generate at the end (0: none)",
      "KEEL_TRAIN_SAMPLE_BYTES")
      ->check(CLI::Range(0, 100000));
  opt("--prompt", o.prompt, "prompt of the final sample", "KEEL_TRAIN_PROMPT");
  opt("--on-nonfinite", a.on_nonfinite,
      "a NaN or infinite loss or gradient norm (read at log points and before each evaluation "
      "and checkpoint): stop (exit 1, that state neither evaluated nor checkpointed) or continue",
      "KEEL_TRAIN_ON_NONFINITE")
      ->check(CLI::IsMember({"stop", "continue"}));
}

// A checkpoint's model: its config and parameters.
NamedTensors read_model(const std::string& path, nn::GptConfig& config) {
  train::FoundCheckpoint found = train::read_checkpoint_or_newest(path);
  const std::string& checkpoint = found.dir;
  const train::CheckpointData& d = found.data;
  config = train::read_trainer_json(d.trainer, checkpoint + "/trainer.json").config;
  // The file's tensors against the config's shapes before allocating them: a config that does
  // not describe them (a vocab edited into the billions, say) is refused, not allocated.
  std::map<std::string, TensorType> want;
  for (const auto& [name, shape] : nn::gpt_param_shapes(config)) want[name] = {DType::f32, shape};
  try {
    train::check_tensors(want, d.model, checkpoint + "/model.safetensors");
  } catch (const InputError& e) {
    throw InputError(
        fmt::format("{}; its trainer.json does not describe its model.safetensors: "
                    "restore trainer.json, or give the checkpoint both came from",
                    e.what()));
  }
  train::TensorMap params;
  for (const auto& [name, tensor] : train::zeros_like_params(config)) params[name] = tensor.array();
  train::copy_into(params, d.model, checkpoint + "/model.safetensors");
  NamedTensors p;
  for (const auto& [name, arr] : params) p[name] = Tensor(arr);
  return p;
}

struct SampleArgs {
  std::string checkpoint, prompt = "template <typename _Tp>\n", prompts_file;
  int64_t bytes = 200, seed = 0;
  double temperature = 0.8;
};

void run_sample(const SampleArgs& a) {
  Runtime runtime(resolve_launch_policy());
  nn::GptConfig c;
  const NamedTensors p = read_model(a.checkpoint, c);
  // Under mpirun the processes split the prompts; the first prints. One prompt: the first only.
  const train::DataShare share = train::data_share(runtime);
  if (a.prompts_file.empty()) {
    if (!share.leader) return;
    fmt::print(
        "{}{}\n", a.prompt,
        train::sample_text(c, p, a.prompt, a.bytes, static_cast<uint64_t>(a.seed), a.temperature));
    return;
  }
  // One prompt per line; the prompts' lengths choose the programs' context lengths.
  std::vector<std::string> prompts;
  std::istringstream lines(files::read_file(a.prompts_file, kMaxConfigBytes, "the prompts file"));
  for (std::string line; std::getline(lines, line);) prompts.push_back(line + "\n");
  if (prompts.empty()) {
    throw InputError(
        fmt::format("[sample] {} holds no prompts; write one per line", a.prompts_file));
  }
  BucketStats stats;
  const std::vector<std::string> out = train::sample_texts(
      c, p, prompts, a.bytes, static_cast<uint64_t>(a.seed), a.temperature, 0, &stats, share);
  if (!share.leader) return;
  for (size_t i = 0; i < prompts.size(); ++i) fmt::print("{}{}\n", prompts[i], out[i]);
  fmt::print(
      stderr,
      "sample_prompts: {} programs for {} prompts (context lengths {}); {:.1f}% of positions "
      "were padding\n",
      stats.used.size(), prompts.size(), fmt::join(stats.used, ", "),
      100.0 * stats.padding_fraction());
}

struct EvalArgs {
  std::string checkpoint;
  std::vector<std::string> data;
  std::string split = "validation";
};

// Whole documents of any length, through bucketed programs (train/evaluate.h): the validation
// split keel train holds out of the same data, or every document of held-out text.
void run_eval(const EvalArgs& a) {
  Runtime runtime(resolve_launch_policy());
  nn::GptConfig c;
  const NamedTensors p = read_model(a.checkpoint, c);
  std::vector<std::string> paths = a.data;
  if (paths.empty()) paths = {data::default_corpus_dir()};
  data::CorpusOptions options;
  options.all_validation = a.split == "all";
  const data::Corpus corpus = data::load_corpus(paths, options);
  BucketStats stats;
  // Under mpirun the processes split the windows; the first prints the whole figure.
  const train::DataShare share = train::data_share(runtime);
  const train::EvalLog e = train::evaluate_documents(c, p, corpus.validation, 0, &stats, share);
  if (!share.leader) return;
  fmt::print(
      "{} loss {:.4f}, {:.3f} bits/byte over {} whole documents ({}; {} bytes, {} "
      "windows); {} programs (lengths {}), {:.1f}% of positions were padding\n",
      options.all_validation ? "held-out" : "validation", e.loss, e.bits_per_byte,
      corpus.validation.size(), options.all_validation ? "every document" : "the validation split",
      corpus.validation_bytes(), stats.calls, stats.used.size(), fmt::join(stats.used, ", "),
      100.0 * stats.padding_fraction());
}

}  // namespace

void add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a byte-level GPT on C++ source (default: the libstdc++ headers): one compiled "
      "program per step, evaluation, checkpoints, metrics.jsonl, TensorBoard events, "
      "record.json. Ctrl-C, SIGTERM or SIGUSR1 (the one to send mpirun) stops it after the "
      "step in flight, with a checkpoint; --resume continues it");
  add_train_options(cmd, *a);
  on_run(cmd, [a] { run_train(*a); });

  auto s = std::make_shared<SampleArgs>();
  CLI::App* sample = app.add_subcommand("sample", "Generate text from a checkpoint");
  sample
      ->add_option("--checkpoint", s->checkpoint,
                   "a checkpoint directory (.../step-N), or a run directory for its newest")
      ->required()
      ->envname("KEEL_SAMPLE_CHECKPOINT");
  sample->add_option("--prompt", s->prompt, "text to continue")
      ->capture_default_str()
      ->envname("KEEL_SAMPLE_PROMPT");
  sample->add_option("--bytes", s->bytes, "bytes to generate")
      ->capture_default_str()
      ->envname("KEEL_SAMPLE_BYTES")
      ->check(CLI::Range(1, 100000));
  sample
      ->add_option("--prompts-file", s->prompts_file,
                   "one prompt per line; each is sampled, through at most "
                   "shape_guard.max_programs_per_function programs of bucketed lengths")
      ->envname("KEEL_SAMPLE_PROMPTS_FILE");
  sample->add_option("--seed", s->seed, "sampling seed")
      ->capture_default_str()
      ->envname("KEEL_SAMPLE_SEED");
  sample
      ->add_option("--temperature", s->temperature,
                   "softmax temperature; 0: the most likely byte each time (greedy)")
      ->capture_default_str()
      ->envname("KEEL_SAMPLE_TEMPERATURE");
  on_run(sample, [s] { run_sample(*s); });

  auto e = std::make_shared<EvalArgs>();
  CLI::App* eval = app.add_subcommand(
      "eval",
      "Score whole documents of any length from a checkpoint (bits/byte): the validation split "
      "of --data, or all of it");
  eval->add_option("--checkpoint", e->checkpoint,
                   "a checkpoint directory (.../step-N), or a run directory for its newest")
      ->required()
      ->envname("KEEL_EVAL_CHECKPOINT");
  eval->add_option("--data", e->data,
                   "files or directories of text (default: the libstdc++ headers)")
      ->envname("KEEL_EVAL_DATA");
  eval->add_option("--split", e->split,
                   "validation: the documents keel train holds out of --data (about 5 %); all: "
                   "every document, for held-out text")
      ->capture_default_str()
      ->check(CLI::IsMember({"validation", "all"}))
      ->envname("KEEL_EVAL_SPLIT");
  on_run(eval, [e] { run_eval(*e); });
}

}  // namespace keel::cli
