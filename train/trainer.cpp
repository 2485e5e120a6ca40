// run_training: the loop over a run's named phases (training.h), and what a stop request or a
// failure leaves behind.
#include "train/trainer.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ir/error.h"
#include "ir/utf8_escape.h"
#include "train/data_parallel.h"
#include "train/run_timeline.h"
#include "train/stop_request.h"
#include "train/training.h"

namespace keel::train {

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
                              {"stop_on_nonfinite", stop_on_nonfinite},
                              {"indexer_warmup", indexer_warmup},
                              {"init_from", bytes_to_utf8(init_from)},
                              {"indexer_warmup_lr", indexer_warmup_lr}};
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
  Training run(rt, o, ev);  // options, mesh, data: a bad corpus costs no compile
  const TrainEvents& said = data_share(rt).leader ? ev : TrainEvents{};
  if (const int signal = stop_before_steps(rt)) {
    return stopped_before_steps(said, signal, startup.first_step, "");
  }
  run.start();
  startup.first_step = run.first_step();
  if (const int signal = stop_before_steps(rt)) {
    return stopped_before_steps(said, signal, startup.first_step, "");
  }
  run.prepare_programs();
  run.warm_up_indexers();
  // Marked before the last look, so a signal from here on waits for the step in flight.
  mark_steps_started();
  if (const int signal = stop_before_steps(rt)) {
    return stopped_before_steps(said, signal, startup.first_step, "");
  }
  startup.stepping = true;
  for (int64_t step = run.first_step(); step <= o.steps; ++step) {
    const int64_t reads = host_read_count(), lone = lone_host_read_count();
    const StepDone done = run.step(step);
    run.log_window(done);
    if (done.evaluates) run.evaluate(step);
    if (done.checkpoints) run.checkpoint(step);
    run.count_host_reads(done, host_read_count() - reads, lone_host_read_count() - lone);
    if (done.stop) {
      run.stopped_after(step, done.stop);
      break;
    }
  }
  run.sample();
  return run.finish();
}

}  // namespace

TrainResult run_training(Runtime& rt, const TrainOptions& o, const TrainEvents& ev) {
  start_run_timeline(rt);
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
