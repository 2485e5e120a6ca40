#pragma once
// The canonical text form of a graph. Printing then parsing gives an identical graph.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace keel {

// One node per line: `%3 = mul(%1, %2) : f32[4,8] @ "model.cpp":42`.
std::string print_graph(const Graph& g, bool with_locations = true);
// Throws keel::Error "[ir.parse] <source>:<line>:<col>: expected ..., got ...".
Graph parse_graph(std::string_view text, std::string_view source = "<text>");

// Everything print_graph writes after the `graph <name> {` line: the name-free encoding
// that graph_hash digests.
std::string print_graph_body(const Graph& g, bool with_locations);
// One attribute value / one array element exactly as print_graph writes it.
std::string attr_value_str(const AttrValue& v, bool with_locations = true,
                           const std::string& indent = "");
std::string array_element_str(const Array& a, int64_t i);

// Float spellings shared by printer and parser: the shortest decimal that reads back to the
// same bits, inf, -inf, nan, -nan, or nan(0x<bits>) for any other NaN. Doubles always carry
// a '.', 'e', "inf" or "nan" so they never read as integers. Readers give nullopt otherwise.
std::string f32_text(float f);
std::string bf16_text(uint16_t b);
std::string f64_text(double d);
std::optional<float> parse_f32_text(std::string_view s);
std::optional<uint16_t> parse_bf16_text(std::string_view s);
std::optional<double> parse_f64_text(std::string_view s);
// `s` in double quotes with \\ \" \n \t and \xHH escapes; unescape_text reverses it on the
// text between the quotes, nullopt on a bad escape. With `unicode_escapes`, \u00HH instead of
// \xHH: a TOML (or JSON) basic string.
std::string quoted_text(std::string_view s, bool unicode_escapes = false);
// A graph's or attribute's name as the text spells it: bare when an identifier, else quoted; so
// a name from a file prints on one line with no control characters.
std::string name_text(std::string_view s);
std::optional<std::string> unescape_text(std::string_view body);
// `s` with control characters (C0, DEL, and C1 as UTF-8 spells them) as \xHH escapes and nothing
// else changed: free text from a file or the command line printed on one line without steering
// the terminal. Backslashes stay as they are, so it is for reading, not for parsing back.
std::string printable_text(std::string_view s);

}  // namespace keel
