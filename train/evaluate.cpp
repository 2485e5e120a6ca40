#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "data/loader.h"

namespace keel::train {

EvalLog evaluate(const nn::GptConfig& model, const EvalFn& eval_fn, const Params& params,
                 const std::vector<data::Document>& docs, int64_t batches, int64_t step) {
  data::LoaderConfig lc;
  lc.batch = model.batch;
  lc.seq = model.seq;
  lc.seed = 0;
  lc.shuffle = true;
  data::Loader val(docs, lc);
  double nats = 0, count = 0;
  for (int64_t i = 0; i < batches; ++i) {
    std::vector<Tensor> fields;
    for (Array& a : val.next().fields()) fields.emplace_back(std::move(a));
    auto [total, n] = eval_fn(params, fields);
    nats += total.item();
    count += n.item();
  }
  EvalLog e;
  e.step = step;
  e.loss = nats / std::max(count, 1.0);
  e.bits_per_byte = e.loss / std::log(2.0);
  return e;
}

}  // namespace keel::train
