#pragma once
// A checkpoint's trainer.json, read in one place (resume and keel sample): every field either
// typed and checked or one keel::InputError naming the file and the field.
#include <cstdint>
#include <optional>
#include <string>

#include "data/loader.h"
#include "nn/gpt.h"
#include "policy/bundle.h"

namespace keel::train {

struct TrainerJson {
  int64_t step = 0;
  data::Cursor cursor;  // rows the loader handed out: step x accum x config.batch
  nn::GptConfig config;
  int64_t accum = 1;
  uint64_t seed = 0;
  std::optional<policy::Bundle> bundle;  // absent in hand-made checkpoints
};

// `source` is the file the text came from. Errors read "[checkpoint] SOURCE: field "accum" must
// be an integer >= 1, found "x"" (the config's own fields are checked by nn::GptConfig, with
// the tokenizer's vocabulary as the least vocab, and the cursor by data::Cursor).
TrainerJson read_trainer_json(const std::string& text, const std::string& source);

}  // namespace keel::train
