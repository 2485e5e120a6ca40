#include "nn/variables.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "ir/error.h"

namespace keel::nn {

Variables::Variables(const NamedTensors& values) {
  std::map<const std::byte*, std::string> owner;
  for (const auto& [name, t] : values) {
    const Array& a = t.storage();
    if (a.nbytes() > 0 && !owner.emplace(a.data(), name).second) {
      throw Error(
          fmt::format("[nn] variables '{}' and '{}' would share one buffer; give each "
                      "variable its own array",
                      owner.at(a.data()), name));
    }
    arrays_.emplace(name, a);
  }
}

Variables Variables::allocate(const std::map<std::string, TensorType>& types) {
  Variables v;
  for (const auto& [name, t] : types)
    v.arrays_.emplace(name, Array::uninitialized(t.dtype, t.shape));
  return v;
}

NamedTensors Variables::tensors() const {
  NamedTensors out;
  for (const auto& [name, a] : arrays_) out.emplace(name, Tensor::held_by_device(a));
  return out;
}

void Variables::update(const NamedTensors& next) {
  copies_ += copy_in(next);
}

void Variables::assign(const NamedTensors& values) {
  copy_in(values);
}

int64_t Variables::copy_in(const NamedTensors& next) {
  std::vector<std::string> problems;
  for (const auto& [name, a] : arrays_) {
    auto it = next.find(name);
    const TensorType want{a.dtype(), a.shape()};
    if (it == next.end()) {
      problems.push_back(name + " missing");
    } else if (!it->second.defined() || it->second.type() != want) {
      problems.push_back(fmt::format("{} is {}, the variable {}", name,
                                     it->second.defined() ? it->second.type().str() : "empty",
                                     want.str()));
    }
  }
  for (const auto& [name, t] : next) {
    if (!arrays_.count(name)) problems.push_back(name + " is not a variable here");
  }
  if (!problems.empty()) {
    throw Error(
        fmt::format("[nn] variables cannot take these values: {}; pass exactly the "
                    "variables' names, shapes and dtypes (a step returns what it took)",
                    fmt::join(problems, "; ")));
  }
  // Every source read before the first write, so a throw leaves the storage as it was; a source
  // that is another variable's storage is copied first, so no write overwrites a later read.
  std::map<const std::byte*, int> mine;
  for (const auto& [name, a] : arrays_) mine[a.data()] = 1;
  std::vector<std::pair<Array*, Array>> moves;
  for (auto& [name, a] : arrays_) {
    Array value = next.at(name).storage();
    if (value.data() == a.data() || a.nbytes() == 0) continue;
    if (mine.count(value.data())) value = value.clone();
    moves.emplace_back(&a, std::move(value));
  }
  for (auto& [into, value] : moves) std::memcpy(into->data(), value.data(), into->nbytes());
  return static_cast<int64_t>(moves.size());
}

std::map<std::string, const std::byte*> Variables::storage() const {
  std::map<std::string, const std::byte*> out;
  for (const auto& [name, a] : arrays_) out[name] = a.data();
  return out;
}

}  // namespace keel::nn
