// A step whose input length drifts after warm-up, as sequence lengths do in real data. Under
// the `train` profile (shape_guard.mode = "strict") keel stops at the first new program with an
// error naming the line that defined the function, instead of compiling one program per length.
// The fix: keel::bucketed pads lengths to a few buckets, so a budget of programs covers them all.
// Usage: shape_guard [--profile NAME] (default: train)
#include <keel/keel.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using keel::Tensor;

// Rows of `length` tokens: a feature per token, 0.01 * (row + position).
Tensor rows(int64_t length) {
  std::vector<float> v(size_t(4 * length));
  for (int64_t i = 0; i < 4 * length; ++i) v[size_t(i)] = 0.01f * float(i / length + i % length);
  return Tensor(keel::Array::from_f32({4, length}, v));
}

int main(int argc, char** argv) try {
  keel::policy::PolicySources sources{.environment = keel::policy::keel_environment()};
  sources.profile = argc > 2 && std::string(argv[1]) == "--profile" ? argv[2] : "train";
  keel::Runtime runtime(keel::policy::resolve_policy(sources));
  const std::vector<int64_t> lengths = {64, 64, 64, 57, 61, 33, 64, 12, 40};

  // 1. Compiled as is: each new length is a new program. After warm-up, strict mode refuses.
  auto score = keel::compile("score", [](const Tensor& x) {
    return keel::sum(keel::tanh(x * 2.0), {1});  // [4, L] -> [4]
  });
  bool stopped = false;
  for (int64_t length : lengths) {
    try {
      score(rows(length));
      std::printf("score: length %lld ran (%zu programs)\n", (long long)length,
                  score.programs().size());
    } catch (const keel::Error& e) {
      std::printf("score: length %lld stopped the run:\n  %s\n", (long long)length, e.what());
      stopped = true;
      break;
    }
  }

  // 2. The fix: the same computation, bucketed. Padding is masked out by `valid`, so the
  // results equal the unpadded ones; lengths share a few programs.
  keel::BucketOptions options;
  options.max_length = 64;
  options.warmup = 3;
  auto bucketed_score = keel::bucketed(
      "score_bucketed",
      [](const std::vector<Tensor>& args, const Tensor& valid) {
        const int64_t L = args[0].shape()[1];
        Tensor mask = keel::broadcast_to(keel::reshape(valid, {1, L}), {4, L});
        return std::vector<Tensor>{keel::sum(keel::tanh(args[0] * 2.0) * mask, {1})};
      },
      options);
  bool matches = true;
  for (int64_t length : lengths) {
    const Tensor got = bucketed_score({rows(length)})[0];
    double want = 0;  // row 0 unpadded, on the host
    for (int64_t t = 0; t < length; ++t) want += std::tanh(2.0 * double(0.01f * float(t)));
    matches = matches && std::abs(got.to_f32()[0] - want) <= 1e-4 * (1 + std::abs(want));
    std::printf("score_bucketed: length %lld -> %.6f (unpadded %.6f), %lld programs\n",
                (long long)length, got.to_f32()[0], want, (long long)bucketed_score.programs());
  }
  keel::BucketStats s = bucketed_score.stats();
  std::printf("bucketed: %lld calls, %lld programs, padding %.1f%% of positions\n",
              (long long)s.calls, (long long)bucketed_score.programs(),
              100.0 * s.padding_fraction());
  if (!stopped) std::fprintf(stderr, "the strict shape guard did not stop 'score'\n");
  if (!matches) std::fprintf(stderr, "a bucketed result differs from the unpadded one\n");
  return stopped && matches ? 0 : 3;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
