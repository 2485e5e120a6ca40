#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "dist/deadline.h"
#include "ir/error.h"
#include "nn/layers.h"
#include "trace/ops.h"

namespace keel::train {
namespace {

// Where item i of a round-robin split (item i on process i mod ranks, `rounds` items each)
// lies in gather_over_data's result, at two floats an item.
size_t gathered_at(int64_t i, const DataShare& share, int64_t rounds) {
  return static_cast<size_t>(2 * ((i % share.ranks) * rounds + i / share.ranks));
}

// Each batch's figures, read once every batch has run: their host copies overlap the batches
// that follow instead of stalling each one.
class PendingFigures {
 public:
  void add(size_t slot, const Tensor& figure) {
    figure.start_host_copy();
    figures_.emplace_back(slot, figure);
  }
  void read_into(std::vector<float>& mine) const {
    for (const auto& [slot, figure] : figures_) mine[slot] = static_cast<float>(figure.item());
  }

 private:
  std::vector<std::pair<size_t, Tensor>> figures_;
};

}  // namespace

EvalLog evaluate(const nn::GptConfig& model, const EvalFn& eval_fn, const NamedTensors& params,
                 const std::vector<data::Document>& docs, int64_t batches, int64_t step,
                 const DataShare& share, bool first, bool lockstep) {
  data::LoaderConfig lc;
  lc.batch = model.batch;
  lc.seq = model.seq;
  lc.seed = 0;
  lc.shuffle = true;
  data::Loader val(docs, lc);
  // This process's batches: (nats, targets) per round, zeros past the last batch.
  const int64_t rounds = (batches + share.ranks - 1) / share.ranks;
  std::vector<float> mine(static_cast<size_t>(2 * rounds), 0.0f);
  PendingFigures pending;
  const int64_t runs = lockstep ? rounds * share.ranks : batches;
  for (int64_t i = 0; i < runs; ++i) {
    data::Batch b = i < batches ? val.next() : data::empty_batch(1, model.batch, model.seq);
    if (i % share.ranks != share.rank) continue;
    std::vector<Tensor> fields;
    for (Array& a : b.fields()) fields.emplace_back(std::move(a));
    auto [total, n] = eval_fn(params, fields);
    if (i >= batches) continue;  // run only to meet the other processes' collectives
    const auto round = static_cast<size_t>(i / share.ranks);
    pending.add(2 * round, total);
    pending.add(2 * round + 1, n);
  }
  pending.read_into(mine);
  // The first evaluation's gather waits out every rank's first run of eval_step (a compile on a
  // host whose cache is cold, while a rank without a batch is already here).
  const dist::WaitScope wait("the evaluation's gather", first);
  const std::vector<float> all = share.ranks > 1 ? gather_over_data(mine) : mine;
  double nats = 0, count = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const size_t at = gathered_at(i, share, rounds);
    nats += all[at];
    count += all[at + 1];
  }
  EvalLog e;
  e.step = step;
  e.loss = nats / std::max(count, 1.0);
  e.bits_per_byte = e.loss / std::log(2.0);
  return e;
}

EvalLog evaluate_documents(const nn::GptConfig& model, const NamedTensors& params,
                           const std::vector<data::Document>& docs, int64_t max_programs,
                           BucketStats* stats, const DataShare& share) {
  if (docs.empty()) {
    throw InputError("[eval] no validation documents to score; give --data with more files");
  }
  const int64_t T = model.seq;
  // One window: tokens, targets, loss mask and positions [1, L]; the parameters follow, by name.
  BucketOptions o;
  o.axis = 1;
  o.max_length = T;
  o.max_programs = max_programs;
  std::vector<Tensor> args(4);
  const std::vector<std::string> names = append_params(params, args, o);
  BucketedFn window = bucketed(
      "eval_documents",
      [model, names](const std::vector<Tensor>& a, const Tensor& valid) {
        const NamedTensors p = params_at(a, 4, names);
        const int64_t L = a[0].shape()[1];
        const Tensor mask = a[2] * broadcast_to(reshape(valid, {1, L}), {1, L});
        return std::vector<Tensor>{
            nn::gpt_nll_sum(model, p, a[0], a[1], mask, a[3], zeros_like(a[0])), sum(mask)};
      },
      o);
  // Every window's length is known before the first runs: the buckets are chosen from them.
  std::vector<int64_t> lengths;
  for (const data::Document& d : docs) {
    const int64_t predictions = static_cast<int64_t>(d.bytes.size()) + 1;
    for (int64_t at = 0; at < predictions; at += T)
      lengths.push_back(std::min(T, predictions - at));
  }
  if (!lengths.empty()) window.plan(lengths);
  // This process's windows (window i runs on process i mod ranks): (nats, targets) per round.
  const auto windows = static_cast<int64_t>(lengths.size());
  const int64_t rounds = (windows + share.ranks - 1) / share.ranks;
  std::vector<float> mine(static_cast<size_t>(2 * rounds), 0.0f);
  PendingFigures pending;
  int64_t i = 0;
  for (const data::Document& d : docs) {
    // The previous document's end starts this one, and its own end closes it.
    std::vector<int64_t> seq{data::kEndOfDocument};
    for (unsigned char ch : d.bytes) seq.push_back(ch);
    seq.push_back(data::kEndOfDocument);
    const int64_t predictions = static_cast<int64_t>(seq.size()) - 1;
    for (int64_t at = 0; at < predictions; at += T, ++i) {
      if (i % share.ranks != share.rank) continue;
      const int64_t L = std::min(T, predictions - at);
      Array tokens(DType::i64, {1, L}), targets(DType::i64, {1, L}), pos(DType::i64, {1, L});
      for (int64_t t = 0; t < L; ++t) {
        tokens.set_i64(t, seq[size_t(at + t)]);
        targets.set_i64(t, seq[size_t(at + t + 1)]);
        pos.set_i64(t, t);
      }
      args[0] = Tensor(tokens);
      args[1] = Tensor(targets);
      args[2] = Tensor(Array::full({1, L}, 1.0));
      args[3] = Tensor(pos);
      const std::vector<Tensor> out = window(args);
      const auto round = static_cast<size_t>(i / share.ranks);
      pending.add(2 * round, out[0]);
      pending.add(2 * round + 1, out[1]);
    }
  }
  pending.read_into(mine);
  std::vector<float> all = mine;
  BucketStats whole = window.stats();
  if (share.ranks > 1) {
    // Ranks reach the gather as their windows end (a compile each may take the long deadline).
    const dist::WaitScope wait("the evaluation's gather", true);
    all = gather_over_data(mine);
    whole = gather_bucket_stats(whole);
  }
  // Every window's figures in window order, as one process adds them.
  double nats = 0, count = 0;
  for (int64_t w = 0; w < windows; ++w) {
    const size_t at = gathered_at(w, share, rounds);
    nats += all[at];
    count += all[at + 1];
  }
  if (stats) *stats = whole;
  EvalLog e;
  e.loss = nats / std::max(count, 1.0);
  e.bits_per_byte = e.loss / std::log(2.0);
  return e;
}

}  // namespace keel::train
