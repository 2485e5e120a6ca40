#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace keel {

// Every broken rule, one message each: "node %5 (mul) at model.cpp:42: <rule>".
std::vector<std::string> verify_problems(const Graph& g);
// Throws keel::Error "[verify] <first problem>" when the graph breaks a rule.
void verify(const Graph& g);

}  // namespace keel
