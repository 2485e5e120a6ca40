#include "train/tiny_lm.h"

#include <fmt/format.h>

#include <cmath>

#include "autodiff/value_and_grad.h"
#include "ir/error.h"
#include "trace/compile.h"
#include "trace/ops.h"

namespace keel {
namespace {

constexpr int64_t kVocab = 256;
using Weights = std::vector<Tensor>;  // embedding, w1, b1, w2, b2

Tensor uniform(const Scalar& seed, int64_t counter, const Shape& shape, double scale) {
  Tensor c = constant(Array::scalar(static_cast<double>(counter), DType::i64));
  return (rng_uniform(seed, c, shape) * 2.0 - 1.0) * scale;
}

Tensor loss_fn(const Weights& p, const Tensor& x, const Tensor& y) {
  const int64_t batch = x.shape()[0];
  Tensor e = reshape(take(p[0], x), {batch, -1});  // [B, context*embed]
  Tensor h = tanh(matmul(e, p[1]) + p[2]);
  Tensor logits = matmul(h, p[3]) + p[4];  // [B, 256]
  Tensor shifted = logits - stop_gradient(max(logits, {-1}, true));
  Tensor logp = shifted - log(sum(exp(shifted), {-1}, true));
  return -mean(sum(one_hot(y, kVocab) * logp, {-1}));
}

// Windows of `context` bytes and the byte after each, walking through the text.
std::pair<Tensor, Tensor> batch_at(std::string_view text, const TinyLmConfig& c, int64_t step) {
  const int64_t span = static_cast<int64_t>(text.size()) - c.context;
  Array x(DType::i64, {c.batch, c.context});
  Array y(DType::i64, {c.batch});
  for (int64_t i = 0; i < c.batch; ++i) {
    int64_t pos = (step * c.batch + i * 7919) % span;
    for (int64_t j = 0; j < c.context; ++j) {
      x.set_i64(i * c.context + j, static_cast<unsigned char>(text[pos + j]));
    }
    y.set_i64(i, static_cast<unsigned char>(text[pos + c.context]));
  }
  return {Tensor(std::move(x)), Tensor(std::move(y))};
}

}  // namespace

TinyLmRun run_tiny_lm(const TinyLmConfig& c, std::string_view text,
                      const std::function<void(int64_t, double)>& on_step) {
  if (static_cast<int64_t>(text.size()) <= c.context + 1) {
    throw Error(
        fmt::format("[demo] the text has {} bytes; need more than {}", text.size(), c.context + 1));
  }
  auto init = compile("init", [c](const Scalar& seed) {
    const double w1_scale = 1.0 / std::sqrt(static_cast<double>(c.context * c.embed));
    const double w2_scale = 1.0 / std::sqrt(static_cast<double>(c.hidden));
    return Weights{uniform(seed, 0, {kVocab, c.embed}, 1.0),
                   uniform(seed, 1, {c.context * c.embed, c.hidden}, w1_scale),
                   full({c.hidden}, 0.0), uniform(seed, 2, {c.hidden, kVocab}, w2_scale),
                   full({kVocab}, 0.0)};
  });
  auto step = compile("train_step",
                      [](const Weights& p, const Tensor& x, const Tensor& y, const Scalar& lr) {
                        auto [loss, grads] = value_and_grad(loss_fn)(p, x, y);
                        Weights next;
                        for (size_t i = 0; i < p.size(); ++i) next.push_back(p[i] - lr * grads[i]);
                        return std::make_pair(loss, next);
                      });

  TinyLmRun run;
  Weights params = init(Scalar::i64(c.seed));
  for (int64_t s = 0; s < c.steps; ++s) {
    auto [x, y] = batch_at(text, c, s);
    auto [loss, next] = step(params, x, y, Scalar(c.lr));
    params = std::move(next);
    run.losses.push_back(loss.item());  // host read after the step, outside the trace
    if (on_step) on_step(s, run.losses.back());
  }
  run.traces = step.stats().traces;
  if (!step.programs().empty()) {
    run.step_graph_hash = step.programs()[0]->graph_hash;
    run.step_graph = step.programs()[0]->graph;
  }
  return run;
}

std::string_view tiny_lm_default_text() {
  return R"(#include <vector>
template <class T> T sum(const std::vector<T>& xs) {
  T total{};
  for (const T& x : xs) total += x;
  return total;
}
int main() {
  std::vector<int> v{1, 2, 3, 4};
  return sum(v) == 10 ? 0 : 1;
}
struct Point { int x = 0; int y = 0; };
int dot(const Point& a, const Point& b) { return a.x * b.x + a.y * b.y; }
)";
}

}  // namespace keel
