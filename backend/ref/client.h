#pragma once
// The reference interpreter behind the backend interface: compile keeps the verified graph,
// execute interprets it, serialize writes its canonical text. The cheap client for tests (cache
// tests need no system compiler) and the oracle the compiled CPU backend is checked against.
#include <memory>

#include "backend/backend.h"

namespace keel::ref {

std::shared_ptr<backend::Client> make_ref_client();

}  // namespace keel::ref
