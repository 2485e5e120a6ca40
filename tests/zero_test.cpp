// ZeRO's arithmetic over the data axis (train/moment_shards.h, train/train_state.h): the state
// one process holds, and the blocks the global gradient norm is summed in, which every process
// count that splits a tensor must split too; and the host's copy of a shard over "model".
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ir/error.h"
#include "nn/gpt.h"
#include "nn/tensor_parallel.h"
#include "train/model_shards.h"
#include "train/moment_shards.h"
#include "train/step.h"
#include "train/train_state.h"

namespace keel {
namespace {

int64_t megabytes(const train::StateBytes& b) {
  return std::lround(static_cast<double>(b.total()) / 1e6);
}

// The state one process holds (record.json's ranks[i].state_bytes), from the config alone:
// gpt2-m's 1,367 MB whole; with AdamW's moments split (ZeRO stage 1) over 2 and 4 processes,
// 1,025 and 854 MB; with the reduced gradients split too (stage 2), 854 and 598 MB; with the
// blocks split over 2 processes of "model", 687 MB, and with ZeRO stage 3 over 2 processes of
// "data" beside it, 344 MB (a quarter of each split tensor, half of each other); a tensor the
// processes do not divide is refused, naming it.
TEST(TrainState, StateBytesAreTheArithmetic) {
  const nn::GptConfig c = nn::gpt_preset("gpt2-m");
  int64_t parameters = 0;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) parameters += 4 * numel(shape);
  const train::StateBytes whole = train::state_bytes(c);
  EXPECT_EQ(whole.parameters, parameters);
  EXPECT_EQ(whole.gradients, parameters);
  EXPECT_EQ(whole.optimizer, 2 * parameters);
  auto at = [&](int64_t stage, int64_t processes, bool stacked = false) {
    return train::state_bytes(c, stacked, train::StateShards::at_stage(stage, processes));
  };
  EXPECT_EQ(at(0, 4).total(), whole.total());
  EXPECT_EQ(at(1, 2).total(), 3 * parameters);
  EXPECT_EQ(at(1, 4, true).total(), 5 * parameters / 2);  // stacked: the same
  EXPECT_EQ(at(2, 2).gradients, parameters / 2);
  EXPECT_EQ(at(2, 4, true).total(), 7 * parameters / 4);
  EXPECT_EQ(at(3, 2).parameters, parameters / 2);
  EXPECT_EQ(at(3, 4, true).total(), parameters);
  EXPECT_EQ(megabytes(whole), 1367);
  EXPECT_EQ(megabytes(at(1, 2)), 1025);
  EXPECT_EQ(megabytes(at(1, 4)), 854);
  EXPECT_EQ(megabytes(at(2, 2)), 854);
  EXPECT_EQ(megabytes(at(2, 4)), 598);
  EXPECT_EQ(megabytes(at(3, 2)), 684);
  EXPECT_EQ(megabytes(at(3, 4)), 342);
  // The blocks split over "model": each of 2 processes holds half of every block matrix, and of
  // the QKV and MLP-input biases (the output projections' biases and the norms are whole).
  nn::GptConfig split = c;
  split.model_parallel = 2;
  int64_t halved = 0;  // bytes of what the blocks split
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) {
    const bool whole = name.find(".ln_") != std::string::npos || name.ends_with("c_proj.bias");
    if (name.starts_with("h.") && !whole) halved += 4 * numel(shape);
  }
  const train::StateBytes model2 = train::state_bytes(split);
  EXPECT_EQ(model2.parameters, parameters - halved / 2);
  EXPECT_EQ(model2.total(), 4 * (parameters - halved / 2));
  EXPECT_EQ(megabytes(model2), 687);
  const train::StateBytes both =
      train::state_bytes(split, false, train::StateShards::at_stage(3, 2));
  EXPECT_EQ(both.total(), 2 * (parameters - halved / 2));
  EXPECT_EQ(megabytes(both), 344);
  try {
    at(1, 7);
    ADD_FAILURE() << "7 processes split gpt2-m's moments";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of the 7 processes"), std::string::npos)
        << e.what();
  }
}

// A scanned stack is split per layer (each process holds its part of every layer), so each
// layer must divide by the process count, as the unrolled tensors must; the stack's total alone
// does not do.
TEST(TrainState, AScannedStackSplitsPerLayer) {
  const TensorType stack{DType::f32, {3, 4}};
  EXPECT_EQ(train::split_rows("scan.0.0.w", stack.shape), 3);
  EXPECT_EQ(train::split_rows("h.0.w", stack.shape), 1);
  EXPECT_EQ(train::moment_shard_type("h.0.w", stack, 3).shape, (Shape{4}));
  EXPECT_EQ(train::moment_shard_type("scan.0.0.w", stack, 2).shape, (Shape{6}));
  try {
    train::moment_shard_type("scan.0.0.w", stack, 3);
    ADD_FAILURE() << "3 processes split layers of 4 elements";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("scan.0.0.w has 4 elements in each of its layers, not a "
                                         "multiple of the 3 processes"),
              std::string::npos)
        << e.what();
  }
}

// Every process count up to 16 that divides a tensor divides its norm blocks, so a slice holds
// whole blocks; beyond 16 a count may not, and stage 2 refuses it at start, naming the tensor.
TEST(TrainState, NormBlocksSplitOverEveryProcessCountThatSplitsTheTensor) {
  for (const char* preset : {"gpt2-s", "gpt2-m", "code-s", "code-moe-s"}) {
    for (const auto& [name, shape] : nn::gpt_param_shapes(nn::gpt_preset(preset))) {
      const int64_t n = numel(shape);
      for (int64_t shards = 1; shards <= 16; ++shards) {
        if (n % shards != 0) continue;
        EXPECT_EQ(train::norm_blocks(n) % shards, 0) << preset << " " << name;
      }
    }
  }
  EXPECT_EQ(train::norm_blocks(64), 16);
  EXPECT_EQ(train::norm_blocks(7 * 11 * 17), 77);
  const std::map<std::string, TensorType> types = {{"h.0.w", {DType::f32, {8, 8}}}};
  train::check_gradient_slices(types, 16);
  try {
    train::check_gradient_slices(types, 32);
    ADD_FAILURE() << "32 processes split 16 norm blocks";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("h.0.w has 64 elements, summed for the gradient norm in "
                                         "16 blocks"),
              std::string::npos)
        << e.what();
  }
}

// A process's shard of each tensor the blocks split (train::model_shards, copied a run at a time)
// holds exactly the elements nn::model_shard_source names: code-moe-s's fused QKV (GQA, per
// head), SwiGLU's gate and up, and the output projections' rows, over 2 processes (this single
// process is index 0 of "model").
TEST(TrainState, ModelShardsHoldTheElementsTheSplitNames) {
  nn::GptConfig c = nn::gpt_preset("code-moe-s");
  c.layers = 2;
  c.model_parallel = 2;
  train::NamedTensors whole;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) {
    Array a(DType::f32, shape);
    for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, static_cast<double>(i));
    whole[name] = Tensor(a);
  }
  const train::NamedTensors mine = train::model_shards(c, whole);
  const auto splits = nn::gpt_model_splits(c);
  ASSERT_FALSE(splits.empty());
  for (const auto& [name, split] : splits) {
    const Array shard = mine.at(name).array();
    const Shape& full = whole.at(name).shape();
    ASSERT_EQ(shard.shape(), nn::model_shard_shape(full, split, 2)) << name;
    for (int64_t i = 0; i < shard.numel(); ++i) {
      ASSERT_EQ(shard.get_f64(i), double(nn::model_shard_source(full, split, 0, 2, i)))
          << name << " element " << i;
    }
  }
  EXPECT_EQ(mine.at("wte.weight").shape(), whole.at("wte.weight").shape());  // not split
}

}  // namespace
}  // namespace keel
