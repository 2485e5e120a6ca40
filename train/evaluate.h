#pragma once
// Validation through the eval program: the same rows every evaluation and every run (a fixed
// seed, not the run's, picks them from all over the validation text).
#include <cstdint>
#include <vector>

#include "data/corpus.h"
#include "trace/bucketed.h"
#include "train/data_parallel.h"
#include "train/step.h"
#include "train/trainer.h"

namespace keel::train {

// Mean loss per live target over `batches` batches of the model's shape; the host reads the
// program's sums here and only here. With several processes on the data axis, batch i runs on
// process i mod ranks; every process gathers every batch's (nats, targets) and sums them in
// batch order: a token-weighted global figure, equal to one process's bit for bit. `first`: the
// run's first evaluation, whose gather waits with the long deadline (ranks may be compiling).
// `lockstep`: eval_fn makes collectives (it gathers split parameters), so every process runs it
// in every round, on an empty batch (no live targets) past the last.
EvalLog evaluate(const nn::GptConfig& model, const EvalFn& eval_fn, const NamedTensors& params,
                 const std::vector<data::Document>& docs, int64_t batches, int64_t step,
                 const DataShare& share = {}, bool first = false, bool lockstep = false);

// Whole documents of any length: each document (closed by its end-of-document token) is scored
// in consecutive windows of the model's length, every byte predicted once; a document's last,
// shorter window is padded to a bucket (keel::bucketed, at most `max_programs` programs, 0: the
// JIT's budget) with the padding masked out, so the figure is the unpadded computation's.
// `stats` gets the buckets and the padding fraction. With several processes on the data axis
// (all call it together), window i runs on process i mod ranks, and every process gathers every
// window's (nats, targets) and the bucket figures: the same figures as one process's, bit for
// bit.
EvalLog evaluate_documents(const nn::GptConfig& model, const NamedTensors& params,
                           const std::vector<data::Document>& docs, int64_t max_programs = 0,
                           BucketStats* stats = nullptr, const DataShare& share = {});

}  // namespace keel::train
