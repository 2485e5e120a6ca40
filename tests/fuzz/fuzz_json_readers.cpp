// The JSON readers of outside input; the first byte picks one: --config (GptConfig),
// trainer.json, the loader cursor, cache manifests, the bundle, compiles.jsonl lines.
#include "cache/cache.h"
#include "data/loader.h"
#include "diag/compile_log.h"
#include "nn/gpt.h"
#include "policy/bundle.h"
#include "tests/fuzz/fuzz_input.h"
#include "train/trainer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text = keel::fuzz::text_of(data + 1, size - 1);
  keel::fuzz::refuse_only_with_keel_errors([&] {
    switch (data[0] % 6) {
      case 0:
        keel::nn::GptConfig::from_json(text, "config.json", 256);
        break;
      case 1:
        keel::train::read_trainer_json(text, "trainer.json");
        break;
      case 2:
        keel::data::Cursor::from_json(text, "cursor");
        break;
      case 3:
        keel::cache::Manifest::from_json(text, "manifest.json");
        break;
      case 4:
        keel::policy::Bundle::from_json(text, "bundle");
        break;
      default:
        keel::diag::CompileEvent::from_json(text, "compiles.jsonl:1");
        break;
    }
  });
  return 0;
}
