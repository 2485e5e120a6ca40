// A model keel does not ship: an MLP classifying the points of three interleaved spirals,
// trained with keel::compile, value_and_grad and AdamW, checkpointed, resumable, with a run
// record. Usage: custom_model RUN_DIR STEPS [--profile NAME] [--set group.key=value ...]
#include <keel/keel.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

using keel::Tensor, keel::Scalar, keel::NamedTensors;
constexpr int64_t kPoints = 384, kBatch = 128, kClasses = 3, kHidden = 64;

// The model: two tanh layers and a linear head; the loss: mean softmax cross-entropy.
Tensor logits_of(const NamedTensors& p, const Tensor& x) {
  Tensor h = keel::tanh(keel::matmul(x, p.at("w1")) + p.at("b1"));
  h = keel::tanh(keel::matmul(h, p.at("w2")) + p.at("b2"));
  return keel::matmul(h, p.at("w3")) + p.at("b3");
}
Tensor loss_of(const NamedTensors& p, const Tensor& x, const Tensor& y) {
  Tensor z = logits_of(p, x);
  z = z - keel::stop_gradient(keel::max(z, {-1}, true));
  Tensor logp = z - keel::log(keel::sum(keel::exp(z), {-1}, true));
  return -keel::mean(keel::sum(keel::one_hot(y, kClasses) * logp, {-1}));
}

// `count` spiral points starting at `first` of a fixed shuffle of the kPoints, made on the host.
std::pair<Tensor, Tensor> points(int64_t first, int64_t count) {
  std::vector<float> xs(size_t(count * 2));
  keel::Array y(keel::DType::i64, {count});
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = (first + i) * 7919 % kPoints, arm = n % kClasses;  // 7919: coprime
    const double r = double(n / kClasses) / double(kPoints / kClasses);
    const double angle = 4.0 * r + 2.0944 * double(arm) + 0.3 * std::sin(double(n) * 12.9898);
    xs[size_t(2 * i)] = float(r * std::cos(angle));
    xs[size_t(2 * i + 1)] = float(r * std::sin(angle));
    y.set_i64(i, arm);
  }
  return {Tensor(keel::Array::from_f32({count, 2}, xs)), Tensor(std::move(y))};
}

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::fprintf(stderr, "usage: custom_model RUN_DIR STEPS [--profile NAME] [--set k=v ...]\n");
    return 2;
  }
  const std::string run_dir = argv[1];
  const int64_t steps = std::stoll(argv[2]);
  keel::policy::PolicySources sources{.environment = keel::policy::keel_environment()};
  for (int i = 3; i + 1 < argc; i += 2) {
    (std::string(argv[i]) == "--profile" ? sources.profile : sources.sets.emplace_back()) =
        argv[i + 1];
  }
  keel::Runtime runtime(keel::policy::resolve_policy(sources), {.run_dir = run_dir});

  auto init = keel::compile("init", [](const Scalar& seed) {
    auto normal = [&](int64_t counter, keel::Shape shape, double scale) {
      Tensor stream = keel::constant(keel::Array::scalar(double(counter), keel::DType::i64));
      Tensor u = keel::rng_uniform(seed, stream, shape);
      return (u * 2.0 - 1.0) * (scale * std::sqrt(3.0));  // uniform with std `scale`
    };
    return NamedTensors{
        {"w1", normal(1, {2, kHidden}, 1.0)},          {"b1", keel::full({kHidden}, 0.0)},
        {"w2", normal(2, {kHidden, kHidden}, 0.125)},  {"b2", keel::full({kHidden}, 0.0)},
        {"w3", normal(3, {kHidden, kClasses}, 0.125)}, {"b3", keel::full({kClasses}, 0.0)}};
  });
  // The whole step (forward, backward, AdamW) is one program; hyperparameters are device
  // scalars, so changing the learning rate or the step count never recompiles.
  auto train_step = keel::compile(
      "train_step", [](const NamedTensors& p, const NamedTensors& m, const NamedTensors& v,
                       const Tensor& x, const Tensor& y, const std::vector<Scalar>& h) {
        auto [loss, grads] = keel::value_and_grad(loss_of)(p, x, y);
        keel::optim::AdamWResult r =
            keel::optim::adamw_update(p, grads, m, v, {h[0], h[1], h[2], h[3], h[4], h[5]});
        return std::make_tuple(loss, r.params, r.m, r.v);
      });

  // Resume from the newest checkpoint of RUN_DIR, or start from the seeded init program.
  NamedTensors p, m, v;
  int64_t step = 0;
  if (auto found = keel::train::read_latest_checkpoint(run_dir)) {
    step = found->data.step;
    for (auto& [name, value] : found->data.model) p.emplace(name, Tensor(value));
    for (auto& [name, value] : found->data.model) {
      m.emplace(name, Tensor(found->data.optimizer.at(name + ".exp_avg")));
      v.emplace(name, Tensor(found->data.optimizer.at(name + ".exp_avg_sq")));
    }
    std::printf("resumed from %s at step %lld\n", found->dir.c_str(), (long long)step);
  } else {
    p = init(Scalar::i64(runtime.policy().integer("launch.seed")));
    for (auto& [name, value] : p) {
      m.emplace(name, Tensor(keel::Array::full(value.shape(), 0.0)));
      v.emplace(name, Tensor(keel::Array::full(value.shape(), 0.0)));
    }
  }
  double first = NAN, last = NAN;
  for (; step < steps; ++step) {
    auto [x, y] = points(step * kBatch, kBatch);
    std::vector<Scalar> h{Scalar(0.01), Scalar(0.9),  Scalar(0.99),
                          Scalar(1e-8), Scalar(1e-4), Scalar(double(step + 1))};
    auto [loss, p2, m2, v2] = train_step(p, m, v, x, y, h);
    p = std::move(p2), m = std::move(m2), v = std::move(v2);
    last = loss.item();
    if (std::isnan(first)) first = last;
    if ((step + 1) % 20 == 0) std::printf("step %lld loss %.6f\n", (long long)step + 1, last);
  }

  // Every point at once: a second program, with the loss of the whole set.
  auto evaluate = keel::compile("evaluate", loss_of);
  auto [all_x, all_y] = points(0, kPoints);
  const double whole = evaluate(p, all_x, all_y).item();
  // %.9g: every float prints distinctly, so equal text means equal bits.
  std::printf("loss over all %lld points %.9g\n", (long long)kPoints, whole);
  if (std::isnan(last)) {
    std::printf("the newest checkpoint is already at step %lld; nothing to train\n",
                (long long)step);
    return 0;
  }
  keel::train::CheckpointData ckpt{.step = steps};
  for (auto& [name, value] : p) {
    ckpt.model.emplace(name, value.array());
    ckpt.optimizer.emplace(name + ".exp_avg", m.at(name).array());
    ckpt.optimizer.emplace(name + ".exp_avg_sq", v.at(name).array());
  }
  ckpt.trainer = nlohmann::json{{"format", 1}, {"step", steps}, {"model", "spirals"}}.dump();
  std::printf("checkpoint %s\n", keel::train::write_checkpoint(run_dir, ckpt, 2).c_str());
  // The run record: the runtime's (policy with origins, bundle, mesh) and this run's figures.
  nlohmann::json record = nlohmann::json::parse(runtime.record_json());
  record["first_loss"] = first;
  record["final_loss"] = last;
  record["loss_all_points"] = whole;
  record["train_step_programs"] = train_step.programs().size();
  keel::files::publish_file(run_dir + "/record.json", record.dump(2) + "\n");
  std::printf("final loss %.9g after step %lld; train_step programs %zu\n", last, (long long)steps,
              train_step.programs().size());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
