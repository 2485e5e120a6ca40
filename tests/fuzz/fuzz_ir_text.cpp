// The IR text form (keel ir check, program records): parse, verify, and for a graph that
// verifies, the canonical text round-trips to the same structural hash.
#include <cstdlib>

#include "ir/hash.h"
#include "ir/text.h"
#include "ir/verify.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  keel::fuzz::refuse_only_with_keel_errors([&] {
    const keel::Graph g = keel::parse_graph(keel::fuzz::text_of(data, size), "fuzz.kir");
    keel::verify(g);
    const keel::Graph again = keel::parse_graph(keel::print_graph(g), "printed.kir");
    if (keel::graph_hash(again) != keel::graph_hash(g)) std::abort();  // not canonical
  });
  return 0;
}
