#include "nn/variables.h"

#include <fmt/format.h>

#include <vector>

#include "ir/error.h"
#include "trace/jit.h"

namespace keel::nn {

namespace {
// The value's buffer, or a host-made value placed on the current JIT's device.
Buffer on_device(const Tensor& t) {
  return t.is_held_by_device() ? t.buffer() : current_jit()->to_device(t.array());
}
}  // namespace

Variables::Variables(const NamedTensors& values) {
  std::map<const void*, std::string> owner;
  for (const auto& [name, t] : values) {
    Buffer b = on_device(t);
    if (b.nbytes() > 0 && !owner.emplace(b.address(), name).second) {
      throw Error(
          fmt::format("[nn] variables '{}' and '{}' would share one buffer; give each "
                      "variable its own buffer",
                      owner.at(b.address()), name));
    }
    buffers_.emplace(name, std::move(b));
  }
}

Variables Variables::allocate(const std::map<std::string, TensorType>& types) {
  Variables v;
  const std::shared_ptr<Jit> jit = current_jit();
  for (const auto& [name, t] : types)
    v.buffers_.emplace(name, jit->allocate(t.dtype, t.shape, false));
  return v;
}

NamedTensors Variables::tensors() const {
  NamedTensors out;
  for (const auto& [name, b] : buffers_) out.emplace(name, Tensor::held_by_device(b));
  return out;
}

void Variables::update(const NamedTensors& next) {
  copies_ += copy_in(next);
}

void Variables::assign(const NamedTensors& values) {
  copy_in(values);
}

void Variables::assign(const std::string& name, const Array& value) {
  const auto it = buffers_.find(name);
  if (it == buffers_.end() || value.dtype() != it->second.dtype() ||
      value.shape() != it->second.shape()) {
    throw Error(
        fmt::format("[nn] variable {} cannot take a value {}{}: {}", name,
                    dtype_name(value.dtype()), shape_str(value.shape()),
                    it == buffers_.end()
                        ? "there is no such variable"
                        : "it is " + TensorType{it->second.dtype(), it->second.shape()}.str()));
  }
  if (it->second.nbytes() > 0) it->second.assign_from_host(value).wait();
}

int64_t Variables::copy_in(const NamedTensors& next) {
  std::vector<std::string> problems;
  for (const auto& [name, b] : buffers_) {
    auto it = next.find(name);
    const TensorType want{b.dtype(), b.shape()};
    if (it == next.end()) {
      problems.push_back(name + " missing");
    } else if (!it->second.defined() || it->second.type() != want) {
      problems.push_back(fmt::format("{} is {}, the variable {}", name,
                                     it->second.defined() ? it->second.type().str() : "empty",
                                     want.str()));
    } else if (it->second.is_held_by_device() && it->second.buffer().device() != b.device()) {
      problems.push_back(fmt::format("{} is on {}, the variable on {}", name,
                                     it->second.buffer().device(), b.device()));
    }
  }
  for (const auto& [name, t] : next) {
    if (!buffers_.count(name)) problems.push_back(name + " is not a variable here");
  }
  if (!problems.empty()) {
    throw Error(
        fmt::format("[nn] variables cannot take these values: {}; pass exactly the "
                    "variables' names, shapes and dtypes (a step returns what it took)",
                    fmt::join(problems, "; ")));
  }
  // Every source read before the first write, so a refused set leaves the storage as it was (a
  // transfer that fails midway may not); a source that is another variable's storage is copied
  // first, so no write overwrites a later read.
  std::map<const void*, int> mine;
  for (const auto& [name, b] : buffers_) mine[b.address()] = 1;
  std::vector<std::pair<Buffer*, Buffer>> from_device;
  std::vector<std::pair<Buffer*, Array>> from_host;
  for (auto& [name, b] : buffers_) {
    const Tensor& t = next.at(name);
    if (b.nbytes() == 0) continue;
    if (t.is_held_by_device()) {
      Buffer value = t.buffer();
      if (value.address() == b.address()) continue;
      if (mine.count(value.address())) value = value.copy();
      from_device.emplace_back(&b, std::move(value));
    } else {
      Array value = t.array();  // the host's own value: not a host read
      if (value.data() == b.address()) continue;
      if (mine.count(value.data())) value = value.clone();
      from_host.emplace_back(&b, std::move(value));
    }
  }
  std::vector<Event> writes;
  for (auto& [into, value] : from_device) writes.push_back(into->assign_from(value));
  for (auto& [into, value] : from_host) writes.push_back(into->assign_from_host(value));
  for (const Event& e : writes) e.wait();
  return static_cast<int64_t>(writes.size());
}

std::map<std::string, const void*> Variables::storage() const {
  std::map<std::string, const void*> out;
  for (const auto& [name, b] : buffers_) out[name] = b.address();
  return out;
}

}  // namespace keel::nn
