#pragma once
// Where a run starts: a new state from the init program at step 1, or (--resume) the newest
// complete checkpoint copied into freshly allocated Variables (the init program does not run)
// at the step after it, with its data cursor.
#include <cstdint>

#include "data/loader.h"
#include "runtime/runtime.h"
#include "train/train_state.h"
#include "train/trainer.h"

namespace keel::train {

struct Start {
  TrainState state;
  data::Cursor cursor;
  int64_t first_step = 1;
};

// keel::InputError naming the file for no checkpoint, a checkpoint of another config or
// global batch, or one already past --steps. `global_accum`: micro-batches per step over every
// process (--accum times the data-parallel processes), which a resume must keep; the number of
// processes may change.
// `shards`: the processes each part of the state is split over (train/train_state.h); a
// checkpoint holds every part whole, so any split resumes one.
Start start_run(const TrainOptions& o, const Runtime& rt, const nn::GptConfig& model, bool stacked,
                const TrainEvents& ev, int64_t global_accum, StateShards shards = {});

}  // namespace keel::train
