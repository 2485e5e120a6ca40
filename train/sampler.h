#pragma once
// Text generation from a trained model through one compiled program (logits of the next byte
// for a fixed [1, T] context), sampling on the host with a seeded generator.
#include <cstdint>
#include <functional>
#include <string>

#include <vector>

#include "nn/gpt.h"
#include "trace/bucketed.h"
#include "train/data_parallel.h"

namespace keel::train {

// The temperature a sample is drawn at unless one is given.
inline constexpr double kDefaultTemperature = 0.8;

// Up to `bytes` bytes continuing `prompt` (stops early at an end-of-document token), with
// temperature sampling seeded by `seed`; temperature 0 takes the most likely byte each time.
// Control tokens never appear in the result. keel::InputError for a negative or non-finite
// temperature. `params` and `split_parameters` as make_sample_step's: split, every process of
// the mesh calls it together, each from what it holds, and all get the same text.
std::string sample_text(const nn::GptConfig& config, const NamedTensors& params,
                        const std::string& prompt, int64_t bytes, uint64_t seed,
                        double temperature = kDefaultTemperature,
                        const std::map<std::string, TensorType>& split_parameters = {});

// One sample per prompt through bucketed programs: each call's context is padded only to the
// nearest of at most `max_programs` lengths (0: the JIT's budget), chosen from every context
// length the prompts will need. Equal to sample_text's samples; `stats` gets the buckets and
// the padding. The programs are named sample_prompts; a second call in one process shares
// that name's budget with the first. With several processes on the data axis (all call it
// together), prompt j is sampled on process j mod ranks and every process gets every sample
// and the whole run's bucket figures.
std::vector<std::string> sample_texts(const nn::GptConfig& config, const NamedTensors& params,
                                      const std::vector<std::string>& prompts, int64_t bytes,
                                      uint64_t seed, double temperature = 0.8,
                                      int64_t max_programs = 0, BucketStats* stats = nullptr,
                                      const DataShare& share = {});

// Logits of the next byte from the context's tokens (the newest, at most T-1) and the index of
// the last one.
using LogitsFn =
    std::function<std::vector<float>(const std::vector<int64_t>& tokens, int64_t index)>;
// The sampling loop behind both: up to `bytes` draws continuing `prompt` from `logits_of`. The
// fill-in-the-middle markers are never drawn (a document may begin with one, a continuation
// not); the end-of-document token ends the sample.
std::string sample_with(const LogitsFn& logits_of, int64_t T, const std::string& prompt,
                        int64_t bytes, uint64_t seed, double temperature);

// Traces and prepares (compiles or loads) the sampling program without running it, so a run
// knows before its first step that it can sample at the end.
void prepare_sampler(const nn::GptConfig& config, const NamedTensors& params,
                     const std::map<std::string, TensorType>& split_parameters = {});

}  // namespace keel::train
