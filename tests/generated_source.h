#pragma once
// Generated CPU code as it runs, for tests that count what each unit does: units of the same
// code call one shared function (backend/cpu/codegen_share.cpp), so counting in the source
// alone would count a loop every layer runs once.
#include <map>
#include <string>

namespace keel::testing_support {

// `src` with each call of a shared function replaced by that function's statements, and the
// shared functions' definitions left out. Inlined statements keep the shared function's names
// (v_0, t_3), not the unit's node numbers: look for what a unit does, not for a node's name.
inline std::string shared_units_inlined(const std::string& src) {
  const std::string def = "__attribute__((noinline)) void shared", head_end = "  (void)A;\n";
  std::map<std::string, std::string> bodies;  // number -> statements
  std::string rest;
  size_t from = 0;
  for (size_t at = src.find(def); at != std::string::npos; at = src.find(def, from)) {
    const size_t number_end = src.find('(', at + def.size());
    const size_t body = src.find(head_end, at) + head_end.size();
    const size_t close = src.find("\n}\n", body - 1);
    bodies[src.substr(at + def.size(), number_end - at - def.size())] =
        src.substr(body, close + 1 - body);
    rest += src.substr(from, at - from);
    from = close + 3;
  }
  rest += src.substr(from);
  const std::string call = "\n  shared";
  std::string out;
  from = 0;
  for (size_t at = rest.find(call); at != std::string::npos; at = rest.find(call, at + 1)) {
    const size_t number = at + call.size(), number_end = rest.find('(', number);
    const auto body = bodies.find(rest.substr(number, number_end - number));
    if (body == bodies.end() || rest.compare(number_end, 14, "(k, in, out, A") != 0) continue;
    out += rest.substr(from, at + 1 - from);
    out += body->second;
    from = rest.find('\n', number) + 1;
  }
  return out + rest.substr(from);
}

}  // namespace keel::testing_support
