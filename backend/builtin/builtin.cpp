#include "backend/builtin/builtin.h"

#include <mutex>

#include "backend/cpu/backend_spec.h"
#include "backend/cpu/policy_keys.h"
#include "backend/ref/backend_spec.h"
#ifdef KEEL_WITH_CUDA
#include "backend/cuda/backend_spec.h"
#include "backend/cuda/policy_keys.h"
#endif

namespace keel::backend {
namespace {

// Before main, as the policy's schema is fixed when first read; keel links this library whole,
// so this runs in every program linking keel.
void register_policy_keys() {
  static std::once_flag once;
  std::call_once(once, [] {
    policy::register_backend_keys(cpu::policy_keys());
    policy::register_backend_keys(ref::policy_keys());
#ifdef KEEL_WITH_CUDA
    policy::register_backend_keys(cuda::policy_keys());
#endif
  });
}
[[maybe_unused]] const bool kPolicyKeysRegistered = (register_policy_keys(), true);

}  // namespace

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend(cpu::backend_spec());
    register_backend(ref::backend_spec());
#ifdef KEEL_WITH_CUDA
    register_backend(cuda::backend_spec());
#endif
  });
}

}  // namespace keel::backend
