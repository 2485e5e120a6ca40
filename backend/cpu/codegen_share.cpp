// Units that repeat (every layer of a model has the same loops and kernel calls on other
// buffers) share one function: its code is the unit's with node numbers renamed in order of
// appearance, and the unit's own function declares its buffers and passes them. The compiler
// then optimizes each distinct loop once, not once per layer.
#include <algorithm>
#include <cctype>

#include "backend/cpu/codegen_internal.h"

namespace keel::cpu::gen {
namespace {

bool is_word(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// "v123", "p123" or "t123": a buffer, its restrict alias or a value, named by its node.
bool is_node_name(std::string_view token) {
  if (token.size() < 2 || (token[0] != 'v' && token[0] != 'p' && token[0] != 't')) return false;
  for (size_t i = 1; i < token.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(token[i]))) return false;
  }
  return true;
}

// `code` with every node name renamed to its letter, '_' and its rank of first appearance;
// `order` gets the original names in that order.
std::string renamed(const std::string& code, std::vector<std::string>& order) {
  std::map<std::string, std::string, std::less<>> names;
  std::string out;
  out.reserve(code.size());
  for (size_t i = 0; i < code.size();) {
    if (!is_word(code[i])) {
      out += code[i++];
      continue;
    }
    size_t j = i;
    while (j < code.size() && is_word(code[j])) ++j;
    const std::string_view token(code.data() + i, j - i);
    if (is_node_name(token)) {
      auto it = names.find(token);
      if (it == names.end()) {
        const std::string name = fmt::format("{}_{}", token[0], names.size());
        it = names.emplace(std::string(token), name).first;
        order.emplace_back(token);
      }
      out += it->second;
    } else {
      out += token;
    }
    i = j;
  }
  return out;
}

// The buffers `declarations` names ("  const float* v12 = ...;"), with their pointer types;
// false when a line is not one such declaration.
bool declared_types(const std::string& declarations, std::map<std::string, std::string>& types) {
  size_t start = 0;
  while (start < declarations.size()) {
    size_t end = declarations.find('\n', start);
    if (end == std::string::npos) end = declarations.size();
    const std::string line = declarations.substr(start, end - start);
    start = end + 1;
    const size_t star = line.find("* v");
    const size_t eq = line.find(" = ", star == std::string::npos ? 0 : star);
    if (line.rfind("  ", 0) != 0 || star == std::string::npos || eq == std::string::npos) {
      return false;
    }
    const std::string name = line.substr(star + 2, eq - star - 2);
    if (!is_node_name(name)) return false;
    types[name] = line.substr(2, star + 1 - 2);
  }
  return true;
}

}  // namespace

std::string arena_addresses_named(const std::string& code, std::vector<std::string>& offsets) {
  const std::string_view at = "A + ";
  std::string out;
  size_t from = 0;
  for (size_t i = code.find(at); i != std::string::npos; i = code.find(at, i + 1)) {
    size_t end = i + at.size();
    while (end < code.size() && std::isdigit(static_cast<unsigned char>(code[end]))) ++end;
    // Only a whole sum: in "A + 8 * i" the offset is not 8 (that unit then keeps its address).
    const size_t next = code.find_first_not_of(' ', end);
    if ((i > 0 && is_word(code[i - 1])) || end == i + at.size() ||
        (end < code.size() && is_word(code[end])) ||
        (next != std::string::npos &&
         std::string_view("*/%[").find(code[next]) != std::string_view::npos)) {
      continue;
    }
    const std::string offset = code.substr(i + at.size(), end - i - at.size());
    const auto known = std::find(offsets.begin(), offsets.end(), offset);
    const size_t rank = static_cast<size_t>(known - offsets.begin());
    if (known == offsets.end()) offsets.push_back(offset);
    out += code.substr(from, i - from) + fmt::format("a_{}", rank);
    from = end;
  }
  return out + code.substr(from);
}

std::string SharedUnits::statements(const std::string& declarations, const std::string& code,
                                    std::string& defs) {
  std::map<std::string, std::string> types;
  if (!declared_types(declarations, types)) return declarations + code;
  // Notes naming nodes stay with the unit; the shared function keeps the rest.
  std::string notes, body;
  for (size_t start = 0; start < code.size();) {
    size_t end = code.find('\n', start);
    end = end == std::string::npos ? code.size() : end + 1;
    const std::string line = code.substr(start, end - start);
    start = end;
    const size_t first = line.find_first_not_of(' ');
    const bool note = first != std::string::npos && line.compare(first, 2, "//") == 0 &&
                      line.find('%') != std::string::npos;
    (note ? notes : body) += line;
  }
  std::vector<std::string> order, offsets;
  const std::string shared_code = renamed(arena_addresses_named(body, offsets), order);
  std::string params, args;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& name = order[i];
    if (name[0] != 'v') continue;  // restrict aliases and values are the code's own
    const auto it = types.find(name);
    if (it == types.end()) return declarations + code;  // a buffer declared elsewhere
    params += fmt::format(", {} v_{}", it->second, i);
    args += ", " + name;
  }
  for (size_t i = 0; i < offsets.size(); ++i) {
    params += fmt::format(", char* a_{}", i);
    args += ", A + " + offsets[i];
  }
  // The parameter types are part of what must match: a buffer one unit writes another reads.
  const std::string key = params + "\n" + shared_code;
  auto [it, added] = index_.emplace(key, static_cast<int32_t>(index_.size()));
  if (added) {
    defs += fmt::format(
        "__attribute__((noinline)) void shared{}(const keel_kernels* k, const void* const* in,\n"
        "    void* const* out, char* A{}) {{\n"
        "  (void)k;\n  (void)in;\n  (void)out;\n  (void)A;\n{}}}\n\n",
        it->second, params, shared_code);
  }
  return cat(declarations, notes, "  shared", std::to_string(it->second), "(k, in, out, A", args,
             ");\n");
}

}  // namespace keel::cpu::gen
