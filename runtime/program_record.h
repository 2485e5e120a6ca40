#pragma once
// RUN_DIR/programs/<key>.json: each program a run prepared, as its function, cache key,
// input signature, mesh and graph text, so `keel cache prewarm RUN_DIR` can compile the same
// programs later without data and without running a step; and the calls and bytes of each kind
// of collective one run of it makes.
#include <map>
#include <string>
#include <vector>

#include "ir/collective.h"
#include "runtime/jit.h"

namespace keel::runtime {

struct ProgramRecord {
  std::string function, key, signature, mesh, graph;  // graph: ir/text.h's canonical text
  std::string source;                                 // the file it was read from
  // What one run exchanges with other processes (written for reading; not read back).
  std::map<std::string, CollectiveTraffic> collectives;
};

// Published atomically (several processes of a launch may write the same record).
void write_program_record(const std::string& run_dir, const ProgramRecord& record);

// The records under RUN_DIR/programs, or beside a record.json given instead; sorted by file.
// InputError "[cache] <file>: ..." for a missing directory or a damaged record.
std::vector<ProgramRecord> read_program_records(const std::string& run_dir_or_record);

struct PrewarmResult {
  ProgramRecord record;
  std::string key;   // this launch's key for the program (differs when policy or build differ)
  std::string tier;  // "memory", "disk" (already cached) or "compiled"
  double seconds = 0;
};
// Each recorded program compiled (or found) through `jit`'s cache under its recorded mesh.
std::vector<PrewarmResult> prewarm_programs(CachedJit& jit,
                                            const std::vector<ProgramRecord>& records);

}  // namespace keel::runtime
