#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "data/loader.h"
#include "dist/deadline.h"

namespace keel::train {

EvalLog evaluate(const nn::GptConfig& model, const EvalFn& eval_fn, const Params& params,
                 const std::vector<data::Document>& docs, int64_t batches, int64_t step,
                 const DataShare& share, bool first) {
  data::LoaderConfig lc;
  lc.batch = model.batch;
  lc.seq = model.seq;
  lc.seed = 0;
  lc.shuffle = true;
  data::Loader val(docs, lc);
  // This process's batches: (nats, targets) per round, zeros past the last batch.
  const int64_t rounds = (batches + share.ranks - 1) / share.ranks;
  std::vector<float> mine(static_cast<size_t>(2 * rounds), 0.0f);
  for (int64_t i = 0; i < batches; ++i) {
    const data::Batch b = val.next();
    if (i % share.ranks != share.rank) continue;
    std::vector<Tensor> fields;
    for (Array& a : b.fields()) fields.emplace_back(std::move(a));
    auto [total, n] = eval_fn(params, fields);
    const auto round = static_cast<size_t>(i / share.ranks);
    mine[2 * round] = static_cast<float>(total.item());
    mine[2 * round + 1] = static_cast<float>(n.item());
  }
  // The first evaluation's gather waits out every rank's first run of eval_step (a compile on a
  // host whose cache is cold, while a rank without a batch is already here).
  const dist::WaitScope wait("the evaluation's gather", first);
  const std::vector<float> all = share.ranks > 1 ? gather_over_data(mine) : mine;
  double nats = 0, count = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const auto at = static_cast<size_t>(2 * ((i % share.ranks) * rounds + i / share.ranks));
    nats += all[at];
    count += all[at + 1];
  }
  EvalLog e;
  e.step = step;
  e.loss = nats / std::max(count, 1.0);
  e.bits_per_byte = e.loss / std::log(2.0);
  return e;
}

}  // namespace keel::train
