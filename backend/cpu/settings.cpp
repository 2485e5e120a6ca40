#include "backend/cpu/settings.h"

#include <fmt/format.h>

#include "backend/cpu/compiler.h"
#include "ir/error.h"
#include "ir/text.h"

namespace keel::cpu {

std::string Settings::fingerprint() const {
  std::string list;
  for (const std::string& f : flags) {
    list += fmt::format("{}{}", list.empty() ? "" : ",", quoted_text(f));
  }
  return fmt::format("compiler={};flags=[{}]", quoted_text(compiler), list);
}

std::shared_ptr<const Settings> settings_from(const policy::LaunchPolicy& p) {
  auto s = std::make_shared<Settings>();
  s->compiler = p.string("cpu.compiler");
  s->flags = {fmt::format("-O{}", p.integer("cpu.opt_level"))};
  for (const std::string& f : p.strings("cpu.flags")) s->flags.push_back(f);
  s->compile_timeout_s = static_cast<double>(p.integer("cpu.compile_timeout_s"));
  return s;
}

const Settings& settings_of(const backend::CompileOptions& o) {
  static const Settings defaults;
  if (!o.backend_settings) return defaults;
  const auto* mine = dynamic_cast<const Settings*>(o.backend_settings.get());
  if (!mine) {
    throw Error(
        "[backend.cpu] internal: the compile options carry another backend's settings; make "
        "them with the CPU backend's configure_compile (launch.backend = cpu)");
  }
  return *mine;
}

backend::Toolchain toolchain_of(const Settings& s) {
  return {s.compiler, compiler_version(s.compiler, s.compile_timeout_s), s.flags};
}

backend::CompileOptions with_settings(backend::CompileOptions o, Settings settings) {
  o.backend_settings = std::make_shared<const Settings>(std::move(settings));
  return o;
}

}  // namespace keel::cpu
