#include "nn/variables.h"

#include <fmt/format.h>

#include <cstring>

#include "ir/error.h"

namespace keel::nn {

Variables::Variables(const Params& values) {
  std::map<const std::byte*, std::string> owner;
  for (const auto& [name, t] : values) {
    const Array& a = t.array();
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

Params Variables::tensors() const {
  Params out;
  for (const auto& [name, a] : arrays_) out.emplace(name, Tensor(a));
  return out;
}

void Variables::update(const Params& next) {
  copies_ += copy_in(next);
}

void Variables::assign(const Params& values) {
  copy_in(values);
}

int64_t Variables::copy_in(const Params& next) {
  bool same = next.size() == arrays_.size();
  for (auto it = next.begin(); same && it != next.end(); ++it) {
    auto mine = arrays_.find(it->first);
    same = mine != arrays_.end() &&
           it->second.type() == TensorType{mine->second.dtype(), mine->second.shape()};
  }
  if (!same) {
    std::string have, got;
    for (const auto& [name, a] : arrays_)
      have += fmt::format(" {} {}", name, TensorType{a.dtype(), a.shape()}.str());
    for (const auto& [name, t] : next) got += fmt::format(" {} {}", name, t.type().str());
    throw Error(
        fmt::format("[nn] variables{} cannot take the values{}; a step must return "
                    "exactly the variables it was given",
                    have, got));
  }
  int64_t copied = 0;
  for (auto& [name, a] : arrays_) {
    const Array& value = next.at(name).array();
    if (value.data() == a.data() || a.nbytes() == 0) continue;
    std::memcpy(a.data(), value.data(), a.nbytes());
    ++copied;
  }
  return copied;
}

std::map<std::string, const std::byte*> Variables::storage() const {
  std::map<std::string, const std::byte*> out;
  for (const auto& [name, a] : arrays_) out[name] = a.data();
  return out;
}

}  // namespace keel::nn
