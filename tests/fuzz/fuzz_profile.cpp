// Launch policy sources: a TOML profile, then --set lines, then KEEL_* environment lines
// (parts separated by "--8<--" lines), resolved as keel resolves them at start-up.
#include "policy/resolve.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = keel::fuzz::parts_of(keel::fuzz::text_of(data, size), 3);
  keel::policy::PolicySources sources;
  sources.profile = keel::fuzz::write_scratch("profile.toml", parts[0]);
  sources.profile_dirs = {keel::fuzz::scratch_dir(), KEEL_SOURCE_DIR "/profiles"};
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at < text.size()) {
      const size_t end = std::min(text.find('\n', at), text.size());
      out.push_back(text.substr(at, end - at));
      at = end + 1;
    }
    return out;
  };
  sources.sets = lines(parts[1]);
  for (const std::string& line : lines(parts[2])) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) sources.environment[line.substr(0, eq)] = line.substr(eq + 1);
  }
  keel::fuzz::refuse_only_with_keel_errors([&] { keel::policy::resolve_policy(sources); });
  return 0;
}
