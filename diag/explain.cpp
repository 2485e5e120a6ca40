// Explains a miss in the order a user would look: the stack (bundle), the compiler options,
// then the program itself.
#include "diag/explain.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "ir/diff.h"
#include "ir/error.h"
#include "ir/text.h"

namespace keel::diag {
namespace {

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

// key -> value when every non-empty item is `key=value` with a unique key; nullopt otherwise.
std::optional<std::map<std::string, std::string>> as_options(const std::string& fp) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= fp.size()) {
    size_t end = fp.find_first_of(";\n", start);
    if (end == std::string::npos) end = fp.size();
    std::string item = trim(std::string_view(fp).substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    if (!out.emplace(trim(item.substr(0, eq)), trim(item.substr(eq + 1))).second) {
      return std::nullopt;
    }
  }
  return out;
}

std::string shown(const std::string& s) {
  return s.empty() ? "(empty)" : s;
}

}  // namespace

std::vector<std::string> codegen_differences(const std::string& before, const std::string& now) {
  if (before == now) return {};
  auto a = as_options(before), b = as_options(now);
  if (!a || !b || a->empty() || b->empty()) {
    return {fmt::format("codegen options changed: {} -> {}", shown(before), shown(now))};
  }
  std::set<std::string> keys;
  for (const auto& [k, v] : *a) keys.insert(k);
  for (const auto& [k, v] : *b) keys.insert(k);
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    auto x = a->find(k), y = b->find(k);
    std::string va = x == a->end() ? "(missing)" : shown(x->second);
    std::string vb = y == b->end() ? "(missing)" : shown(y->second);
    if (va != vb) out.push_back(fmt::format("codegen option {} changed: {} -> {}", k, va, vb));
  }
  // Only spacing or item order differed: still name the change rather than hide it.
  if (out.empty()) out.push_back(fmt::format("codegen options changed: {} -> {}", before, now));
  return out;
}

std::string explain_miss(const ProgramFacts& now, const std::optional<ProgramFacts>& before) {
  if (!before) return "first compile";
  std::vector<std::string> parts;
  // Bundle::differences gives "field: before -> after".
  for (const std::string& d : before->bundle.differences(now.bundle)) {
    size_t colon = d.find(": ");
    parts.push_back(
        colon == std::string::npos
            ? "bundle " + d
            : fmt::format("bundle field {} changed: {}", d.substr(0, colon), d.substr(colon + 2)));
  }
  for (std::string& d : codegen_differences(before->codegen, now.codegen)) {
    parts.push_back(std::move(d));
  }
  std::string graph = explain_difference(before->graph, now.graph, now.input_names);
  if (!graph.empty()) parts.push_back(std::move(graph));
  if (parts.empty()) return "same program (recompiled after eviction or a cache miss)";
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

ProgramFacts facts_from_text(const std::string& graph_text, const std::string& bundle_json,
                             const std::string& codegen, const std::string& source) {
  ProgramFacts f;
  try {
    f.graph = parse_graph(graph_text, source);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());  // a stored graph that does not parse is bad input
  }
  f.bundle = policy::Bundle::from_json(bundle_json, source);
  f.codegen = codegen;
  return f;
}

}  // namespace keel::diag
