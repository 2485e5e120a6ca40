// Corpora (--data): a text file of any bytes (binary, invalid or odd UTF-8, control bytes, one
// byte), read into documents and split for validation, then packed into batches by the loader.
#include "data/corpus.h"
#include "data/loader.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = keel::fuzz::write_scratch(
      "doc.txt", std::string_view(reinterpret_cast<const char*>(data), size));
  keel::fuzz::refuse_only_with_keel_errors([&] {
    const keel::data::Corpus c = keel::data::load_corpus({path});
    keel::data::LoaderConfig lc;
    lc.batch = 2;
    lc.seq = 8;
    lc.fim_rate = 0.5;  // fill-in-the-middle rearranges the documents too
    keel::data::Loader loader(c.train, lc);
    loader.next();
  });
  return 0;
}
