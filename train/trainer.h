#pragma once
// The trainer behind `keel train`: corpus -> loader -> one program per step, with evaluation,
// checkpoints, resume, metrics.jsonl, TensorBoard events, the run record and the memory
// calibration record. Needs a live keel::Runtime; nothing here reads a device value inside a
// step — the host reads metrics only at log points.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nn/gpt.h"
#include "runtime/runtime.h"
#include "train/step.h"

namespace keel::train {

struct TrainOptions {
  // batch and seq come from here; its layout is launch.layer_layout's, whatever it holds
  nn::GptConfig model = nn::gpt_preset("code-s");
  int64_t steps = 600;
  int64_t accum = 1;  // micro-batches per step, inside the one program
  Hyper hyper;
  std::vector<std::string> data;  // files or directories; empty: the libstdc++ headers
  std::string run_dir = "runs/latest";
  bool resume = false;
  int64_t log_every = 10;
  int64_t eval_every = 100;  // 0: only at the end
  int64_t eval_batches = 16;
  int64_t ckpt_every = 0;  // 0: only at the end
  int keep = 3;
  uint64_t seed = 0;
  double fim_rate = 0.5;
  int64_t sample_bytes = 160;  // 0: no sample (and no sample program)
  std::string prompt = "template <typename _Tp>\n";
  // A NaN or infinite loss or gradient norm, read at log points and before every evaluation and
  // checkpoint, ends the run (keel::Error) before that state is used; false trains on.
  bool stop_on_nonfinite = true;
  // DSA's dense warm-up: steps before step 1 that train only the sparse attention indexers,
  // against the dense attention over every causal key (StepOptions::indexer_warmup), at this
  // constant learning rate. A resumed run has done them.
  int64_t indexer_warmup = 0;
  // A checkpoint (step-N) or run directory whose parameters start this run in place of the
  // init's: each must be one of this model's, of its shape; the model's others are initialised
  // (a dense model's checkpoint into the same model with sparse attention: its indexers). The
  // moments start at zero and the data at its start. A resumed run has its own checkpoint.
  std::string init_from;
  double indexer_warmup_lr = 1e-3;
  std::string to_json() const;  // everything above, for trainer.json and record.json
};

struct StepLog {
  int64_t step = 0, total = 0;
  double loss = 0, lr = 0, grad_norm = 0, ms = 0, tokens_per_s = 0;
  bool compiled = false;         // this step needed a new program
  std::vector<double> mtp_loss;  // per MTP depth, this step
  double moe_aux_loss = 0;       // this step's weighted router losses
  // Sparse attention: the indexers' KL from the attention they pick keys for, summed over the
  // sparse layers, mean over the step's query positions; absent without sparse layers.
  std::optional<double> indexer_kl;
  // Since the previous log point: choices per expert (one row per MoE layer) and the fraction
  // of all choices dropped for capacity.
  std::vector<std::vector<double>> moe_load;
  double moe_dropped_fraction = 0;
  // Data parallel: each process's busy ms per step since the previous log point (its step,
  // data and logging, not its waits for its peers nor the leader's checkpoints), by world rank.
  std::vector<double> rank_busy_ms;
};

struct EvalLog {
  int64_t step = 0;
  double loss = 0;           // nats per live target
  double bits_per_byte = 0;  // byte tokens: bits per token = bits per byte
};

struct TrainEvents {
  std::function<void(const std::string&)> message;        // one line (corpus, resume, checkpoints)
  std::function<void(int64_t step, int64_t total)> tick;  // every step
  std::function<void(const StepLog&)> log;                // every log step
  std::function<void(const EvalLog&)> eval;
};

struct TrainResult {
  int64_t first_step = 1, last_step = 0;
  double final_loss = 0;
  EvalLog final_eval;
  std::string sample;
  std::string record_path;
  std::string report_path;  // RUN_DIR/report.html (the leader's); empty when it failed to write
  int stop_signal = 0;  // the signal of a stop request (train/stop_request.h) that ended it early
  // last_step < first_step when it came before the first step (one process): no step ran, and
  // nothing was written (no checkpoint, record or report).
};

// keel::InputError for bad data, configs or checkpoints (one line naming the file).
TrainResult run_training(Runtime& runtime, const TrainOptions& options, const TrainEvents& events);

}  // namespace keel::train
