#include "train/step.h"

#include <cmath>
#include <numbers>

#include "autodiff/value_and_grad.h"
#include "nn/layers.h"
#include "optim/adamw.h"

namespace keel::train {
namespace {

// Micro-batch k of a [K, B, T] field, as [B, T].
Tensor micro(const Tensor& field, int64_t k) {
  const Shape& s = field.shape();
  return reshape(slice(field, {k, 0, 0}, {k + 1, s[1], s[2]}), {s[1], s[2]});
}

// warm-up: lr * step / warmup; then cosine from lr down to lr * min_ratio at total_steps.
Tensor schedule(const Tensor& step, const Tensor& lr, const Tensor& warmup, const Tensor& total,
                const Tensor& min_ratio) {
  Tensor one = full({}, 1.0);
  Tensor warm = lr * step / maximum(warmup, one);
  Tensor progress = (step - warmup) / maximum(total - warmup, one);
  progress = minimum(maximum(progress, full({}, 0.0)), one);
  Tensor cosine = min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + cos(std::numbers::pi * progress));
  return select(le(step, warmup), warm, lr * cosine);
}

}  // namespace

std::vector<Scalar> step_scalars(const Hyper& h, int64_t step) {
  return {Scalar(static_cast<double>(step)),
          Scalar(h.lr),
          Scalar(h.warmup_steps),
          Scalar(h.total_steps),
          Scalar(h.min_lr_ratio),
          Scalar(h.beta1),
          Scalar(h.beta2),
          Scalar(h.eps),
          Scalar(h.weight_decay),
          Scalar(h.clip_norm)};
}

double scheduled_lr(const Hyper& h, int64_t step) {
  const double s = static_cast<double>(step);
  if (s <= h.warmup_steps) return h.lr * s / std::max(h.warmup_steps, 1.0);
  double progress = (s - h.warmup_steps) / std::max(h.total_steps - h.warmup_steps, 1.0);
  progress = std::min(std::max(progress, 0.0), 1.0);
  return h.lr * (h.min_lr_ratio +
                 (1.0 - h.min_lr_ratio) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

TrainStepFn make_train_step(const nn::GptConfig& config) {
  return TrainStepFn(
      "train_step",
      [config](const Params& p, const Params& m, const Params& v, const std::vector<Tensor>& b,
               const std::vector<Scalar>& s) {
        const Tensor &tokens = b[0], &targets = b[1], &mask = b[2], &positions = b[3],
                     &doc_ids = b[4];
        const int64_t K = tokens.shape()[0];
        // Every micro-batch's loss is divided by the live targets of the whole step, so the sum
        // over micro-batches is the per-token mean and the gradients add up to its gradient.
        Tensor count = maximum(sum(mask), full({}, 1.0));
        Tensor loss;
        Params grads;
        for (int64_t k = 0; k < K; ++k) {
          auto micro_loss = [&](const Params& q, const Tensor& denominator) {
            Tensor logits =
                nn::gpt_logits(config, q, micro(tokens, k), micro(positions, k), micro(doc_ids, k));
            return nn::cross_entropy_sum(logits, micro(targets, k), micro(mask, k)) / denominator;
          };
          auto [l, g] = value_and_grad(micro_loss)(p, count);
          if (k == 0) {
            loss = l;
            grads = g;
          } else {
            loss = loss + l;
            for (auto& [name, t] : grads) t = t + g.at(name);
          }
        }
        // Global-norm clipping: scale = clip / max(norm, clip), or 1 when clip is 0.
        Tensor squares = full({}, 0.0);
        for (const auto& [name, g] : grads) squares = squares + sum(g * g);
        Tensor norm = sqrt(squares);
        const Tensor& clip = s[9];
        Tensor scale = select(gt(clip, full({}, 0.0)), clip / maximum(norm, clip), full({}, 1.0));
        for (auto& [name, g] : grads) g = g * scale;
        Tensor lr = schedule(s[0], s[1], s[2], s[3], s[4]);
        optim::AdamWResult next =
            optim::adamw_update(p, grads, m, v, {lr, s[5], s[6], s[7], s[8], s[0]});
        return StepOutputs{loss, norm, lr, next.params, next.m, next.v};
      },
      {}, SourceLoc::current());
}

EvalFn make_eval_step(const nn::GptConfig& config) {
  return EvalFn(
      "eval_step",
      [config](const Params& p, const std::vector<Tensor>& b) {
        const int64_t K = b[0].shape()[0];
        Tensor total = full({}, 0.0);
        for (int64_t k = 0; k < K; ++k) {
          Tensor logits = nn::gpt_logits(config, p, micro(b[0], k), micro(b[3], k), micro(b[4], k));
          total = total + nn::cross_entropy_sum(logits, micro(b[1], k), micro(b[2], k));
        }
        return std::tuple<Tensor, Tensor>{total, sum(b[2])};
      },
      {}, SourceLoc::current());
}

SampleFn make_sample_step(const nn::GptConfig& config) {
  return SampleFn(
      "sample_step",
      [config](const Params& p, const Tensor& tokens, const Tensor& index) {
        Tensor logits = nn::gpt_logits(config, p, tokens);  // [1, T, V]
        const int64_t T = tokens.shape()[1], V = logits.shape()[2];
        Tensor pick = one_hot(reshape(index, {1}), T);  // [1, T]
        return reshape(dot_general(pick, reshape(logits, {T, V}), {{}, {}, {1}, {0}}), {V});
      },
      {}, SourceLoc::current());
}

}  // namespace keel::train
