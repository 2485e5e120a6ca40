#include "backend/builtin/builtin.h"

#include <mutex>

#include "backend/cpu/backend_spec.h"
#include "backend/ref/backend_spec.h"

namespace keel::backend {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend(cpu::backend_spec());
    register_backend(ref::backend_spec());
  });
}

}  // namespace keel::backend
