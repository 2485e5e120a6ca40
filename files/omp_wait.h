#pragma once
// How long an idle OpenMP thread spins before it sleeps. libgomp spins about 3 ms by default, so
// processes sharing cores burn each other's time at every barrier. libgomp reads its settings
// once, before main, so a keel program starts with a bounded spin: when neither OMP_WAIT_POLICY
// nor GOMP_SPINCOUNT is set, the process re-executes itself once, first thing, with
// GOMP_SPINCOUNT=kSpinCount added (then removes it again, so its children do not inherit it).
// Every program that links keel's runtime does this; set either variable to keep your own.
#include <string>

namespace keel::files {

// About 10 us of spinning (libgomp counts ~100 spins a microsecond): one process alone runs its
// step about as fast as with the default, and a thread whose partner lost its core soon sleeps
// (8 gpt2-s runs sharing 2 cores: 1.06x their time one after another at 1000, 2.6x at 10000).
inline constexpr const char* kSpinCount = "1000";

// The same for LLVM's libomp, when it is in the process (keel or the program built by clang) and
// the environment sets neither OMP_WAIT_POLICY nor KMP_BLOCKTIME: idle threads sleep at once
// (its default spins 200 ms, in steps of a millisecond, a hundred times libgomp's bound). Given
// through kmp_set_defaults.
inline constexpr const char* kLibompBlocktime = "KMP_BLOCKTIME=0";

// The setting libgomp started with, for the run record and the probe: "GOMP_SPINCOUNT=1000 (set
// by keel)", "OMP_WAIT_POLICY=passive", ... or "libgomp's default"; then ", KMP_BLOCKTIME=0 (set
// by keel)" (or the KMP_BLOCKTIME given) when libomp is loaded too.
std::string omp_wait_setting();

}  // namespace keel::files
