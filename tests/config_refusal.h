#pragma once
// The one line nn::GptConfig::from_json (or validate) refuses a model config with (as "m.json"),
// or `accepted` when it takes it: the config tests compare it with the expected message.
#include <string>

#include "ir/error.h"
#include "nn/gpt.h"

namespace keel::testing_support {

inline std::string config_refusal(const std::string& json,
                                  const std::string& accepted = "accepted") {
  try {
    nn::GptConfig::from_json(json, "m.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return accepted;
}

inline std::string validate_refusal(const nn::GptConfig& c) {
  try {
    c.validate("m.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace keel::testing_support
