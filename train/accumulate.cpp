#include "train/accumulate.h"

#include <tuple>

#include "autodiff/value_and_grad.h"
#include "trace/scan.h"
#include "train/step.h"

namespace keel::train {
namespace {

// The sums as a scan carry: a tuple of keel Tree types.
using Carry = std::tuple<Params, Tensor, Tensor, std::vector<Tensor>, Counters>;

Carry as_carry(MicroSums s) {
  return {std::move(s.grads), std::move(s.loss), std::move(s.aux), std::move(s.mtp_loss),
          std::move(s.counters)};
}

MicroSums from_carry(Carry c) {
  return {std::move(std::get<0>(c)), std::move(std::get<1>(c)), std::move(std::get<2>(c)),
          std::move(std::get<3>(c)), std::move(std::get<4>(c))};
}

// One micro-batch (fields [B, T]) added onto `s`: its forward, its gradient, its metrics.
MicroSums add_micro_batch(const nn::GptConfig& config, const Params& p,
                          const std::vector<Tensor>& f, const std::vector<Tensor>& denominators,
                          int64_t K, MicroSums s) {
  nn::GptLosses parts;  // filled while tracing the objective
  auto objective = [&](const Params& q) {
    parts = nn::gpt_losses(config, q, f[0], f[1], f[2], f[3], f[4]);
    Tensor total = step_objective(config, parts, denominators);
    if (config.moe_layers() > 0) total = total + parts.aux_loss / static_cast<double>(K);
    return total;
  };
  auto [value, g] = value_and_grad(objective)(p);
  for (auto& [name, t] : s.grads) t = t + g.at(name);
  s.loss = s.loss + parts.nll / denominators[0];
  s.aux = s.aux + parts.aux_loss / static_cast<double>(K);
  for (size_t i = 0; i < s.mtp_loss.size(); ++i) {
    s.mtp_loss[i] = s.mtp_loss[i] + parts.mtp_nll[i] / denominators[i + 1];
  }
  if (parts.moe_load.defined()) {
    s.counters["moe.load"] = s.counters.at("moe.load") + parts.moe_load;
    s.counters["moe.dropped"] = s.counters.at("moe.dropped") + parts.moe_dropped;
  }
  return s;
}

}  // namespace

MicroSums accumulate_micro_batches(const nn::GptConfig& config, const Params& p,
                                   const std::vector<Tensor>& batch,
                                   const std::vector<Tensor>& denominators,
                                   const Counters& counters, Accumulation how) {
  const int64_t K = batch.at(0).shape()[0];
  MicroSums zero;
  for (const auto& [name, t] : p) zero.grads[name] = zeros_like(t);
  zero.loss = full({}, 0.0);
  zero.aux = full({}, 0.0);
  zero.mtp_loss.assign(static_cast<size_t>(config.mtp_depth()), full({}, 0.0));
  zero.counters = counters;
  const std::vector<Tensor> fields(batch.begin(), batch.begin() + 5);
  const bool scanned = how == Accumulation::scanned || (how == Accumulation::automatic && K > 1);
  if (!scanned) {
    MicroSums s = std::move(zero);
    for (int64_t k = 0; k < K; ++k) {
      std::vector<Tensor> f;
      for (const Tensor& field : fields) f.push_back(micro(field, k));
      s = add_micro_batch(config, p, f, denominators, K, std::move(s));
    }
    return s;
  }
  // The scan slices each [K, B, T] field along K; parameters and denominators are constants.
  auto body = [&](const Carry& carry, const std::vector<Tensor>& f,
                  const std::tuple<Params, std::vector<Tensor>>& consts) {
    MicroSums s =
        add_micro_batch(config, std::get<0>(consts), f, std::get<1>(consts), K, from_carry(carry));
    return std::pair<Carry, std::vector<Tensor>>{as_carry(std::move(s)), {}};
  };
  auto [sums, ys] = scan_tree(body, as_carry(std::move(zero)), fields,
                              std::tuple<Params, std::vector<Tensor>>{p, denominators});
  return from_carry(std::move(sums));
}

}  // namespace keel::train
