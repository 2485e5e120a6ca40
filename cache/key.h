#pragma once
// The canonical encoding a key digests, shared by KeyParts::key() and the manifest check that
// recomputes a stored entry's key from its recorded components.
#include <string>

#include "ir/hash.h"

namespace keel::cache {

// XXH3-128 over length-prefixed fields; the function name and tensor values are never in it.
Hash128 key_of(const std::string& signature, const std::string& graph_hex,
               const std::string& bundle_hash, const std::string& codegen,
               const std::string& platform);

}  // namespace keel::cache
