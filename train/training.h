#pragma once
// One training run as named phases, each a function a test can call: open (options, mesh,
// data), start (memory calibration, the state from init or a checkpoint, the loader), prepare
// programs, then per step: step, log window, evaluate, checkpoint; then sample and finish (the
// run record, calibration, timeline, report). run_training (trainer.h) is the loop over them.
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/loader.h"
#include "runtime/runtime.h"
#include "train/calibration.h"
#include "train/data_parallel.h"
#include "train/metrics_sink.h"
#include "train/resume.h"
#include "train/run_record.h"
#include "train/step_runner.h"
#include "train/trainer.h"

namespace keel::train {

// What one step left for the phases after it.
struct StepDone {
  int64_t step = 0;
  StepResult out;                // device values; read on the host only at a log point
  bool compiled = false;         // this process needed a new program for it
  int stop = 0;                  // a stop request every process agreed on: the run ends after it
  bool every_rank_logs = false;  // a log point on every process (the host checks the loss)
  bool logs = false;             // a log point here: every process's, or this one compiled
  bool evaluates = false;
  bool checkpoints = false;
};

class Training {
 public:
  // Checks the options and the mesh and loads the corpus: a bad corpus costs no compile. Only the
  // leader's events are called.
  Training(Runtime& rt, const TrainOptions& o, const TrainEvents& ev);
  ~Training();
  Training(const Training&) = delete;
  Training& operator=(const Training&) = delete;

  // The memory this config needed last time against the budget (before any compile), the
  // step's layout, the state (initialised, or read from the checkpoint --resume names) and the
  // loader at its cursor.
  void start();
  // Every program the run needs (step, evaluation, sample) traced and compiled or loaded before
  // step 1, so a sealed cache that lacks one stops the run now.
  void prepare_programs();
  // DSA's dense warm-up (--indexer-warmup), on a run that starts at step 1: that many steps of
  // the warm-up program over the training data's first batches, then the indexers' moments
  // zeroed, so the training's AdamW starts them afresh as it does every other parameter. A stop
  // request ends one process's warm-up there (the run stops before step 1, with nothing to
  // checkpoint); under a launcher the processes stop after step 1, whose checkpoint holds it.
  void warm_up_indexers();
  // One step: its batch, its program(s), and the agreement after it (stop requests, busy time).
  // The first opens metrics.jsonl (a resume drops the lines after its checkpoint). log_window,
  // evaluate and checkpoint check for a non-finite loss where every process checks, before the
  // state is used.
  StepDone step(int64_t step);
  // At a log point: the host reads the step's metrics, writes metrics.jsonl and calls the log
  // event; a new window starts. Nothing otherwise.
  void log_window(const StepDone& done);
  void evaluate(int64_t step);    // validation loss and bits per byte, over every process
  void checkpoint(int64_t step);  // written by the leader, waited for by the others
  void sample();  // --sample-bytes of text from the trained model (recorded by the leader)
  // Counts a step's host reads, `lone` of them lone (record.json's "host_reads"): a quiet step
  // should make none, and a reporting step should start every copy before it waits for one.
  void count_host_reads(const StepDone& done, int64_t reads, int64_t lone);
  // The run record, the calibration the next launch reads, the timeline and the report.
  TrainResult finish();

  int64_t first_step() const { return first_step_; }  // 1, or the step after a checkpoint
  const TrainState& state() const;                    // what the steps update, once started
  // Ends the run after `step` for `signal`, saying where it can resume.
  void stopped_after(int64_t step, int signal);
  const TrainResult& result() const { return result_; }

 private:
  struct Context;
  void say(const std::string& line) const;
  // A non-finite loss or gradient norm at `step` ends the run, once per step (--on-nonfinite).
  void check_finite(int64_t step);
  // Counts the steps whose programs have run into the log window, the step times and the
  // timeline; every dispatched step when `wait` (a log point, the end).
  void settle_steps(bool wait);

  std::unique_ptr<Context> c_;
  int64_t first_step_ = 1;
  TrainResult result_;
  RunFigures figures_;
  int64_t host_reads_at_start_ = 0;
  // The log window: steps since the last log point, their seconds, the steps the MoE counters
  // hold, and each process's busy seconds.
  double window_s_ = 0;
  int64_t window_steps_ = 0, counted_steps_ = 0;
  // A step whose programs may still run: when its call began, and when they will all have run.
  // Its time is from its call, or the step before it finishing if later, to its finish.
  struct RunningStep {
    int64_t step = 0;
    std::chrono::steady_clock::time_point called, returned;
    Event finished;
  };
  std::deque<RunningStep> running_;
  std::chrono::steady_clock::time_point last_finished_;
  std::vector<double> window_busy_;
  bool evaluated_ = false;       // the first evaluation's gather waits out every rank's compile
  int64_t last_checkpoint_ = 0;  // 0: none yet
  // Busy time: since this process last spoke to the others after a step, less its waits for
  // them and the leader's own writes (checkpoints, metrics), which the others wait out.
  std::chrono::steady_clock::time_point said_at_;
  double waited_at_ = 0, leader_only_s_ = 0;
};

// A failed job leaves its timeline and a report of what there is; peers may be gone, so nothing
// is gathered.
void leave_failed_run(Runtime& rt, const TrainOptions& o, const TrainEvents& ev);

}  // namespace keel::train
