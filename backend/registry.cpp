#include "backend/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <deque>
#include <mutex>

#include "ir/error.h"

namespace keel::backend {
namespace {

std::mutex g_mu;
// A deque: references handed out by find_backend stay valid as backends are added.
std::deque<BackendSpec>& registry() {
  static std::deque<BackendSpec> specs;
  return specs;
}

}  // namespace

void register_backend(BackendSpec spec) {
  std::lock_guard lock(g_mu);
  for (const BackendSpec& s : registry()) {
    if (s.name == spec.name) {
      throw Error(fmt::format("[backend] a backend named '{}' is already registered", spec.name));
    }
  }
  if (!spec.make_client || !spec.bundle_part) {
    throw Error(fmt::format("[backend] backend '{}' registered without make_client or bundle_part",
                            spec.name));
  }
  registry().push_back(std::move(spec));
}

const BackendSpec& find_backend(const std::string& name) {
  std::lock_guard lock(g_mu);
  std::vector<std::string> names;
  for (const BackendSpec& s : registry()) {
    if (s.name == name) return s;
    names.push_back(s.name);
  }
  throw InputError(fmt::format(
      "[backend] no backend named '{}' is registered (registered: {}); set launch.backend to one "
      "of them",
      name, names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "))));
}

std::vector<std::string> backend_names() {
  std::lock_guard lock(g_mu);
  std::vector<std::string> names;
  for (const BackendSpec& s : registry()) names.push_back(s.name);
  return names;
}

}  // namespace keel::backend
