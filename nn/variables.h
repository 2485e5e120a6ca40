#pragma once
// Variables (DESIGN.md): long-lived named buffers (parameters, optimizer moments, counters)
// whose storage never moves. A step that donates them writes its results into that storage,
// and a resume copies a checkpoint into it, so training state is held once.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "trace/tensor.h"

namespace keel::nn {

class Variables {
 public:
  Variables() = default;
  // Adopts the buffers of these values (an init program's results); a host-made value (zeros) is
  // placed on the current JIT's device first. keel::Error when two of them share a buffer. Two
  // sets must not share one either.
  explicit Variables(const NamedTensors& values);
  // Buffers of these names and types on the current JIT's device, contents unspecified: for a
  // resume to overwrite.
  static Variables allocate(const std::map<std::string, TensorType>& types);

  // Views of the current values to pass to a compiled function (a donating call consumes the
  // views, not the variables).
  NamedTensors tensors() const;
  // A step's new values. Each should already live in its variable's storage (the step donated
  // it); one that does not is copied in, so the storage never moves. keel::Error listing the
  // names when the names, types or devices differ.
  void update(const NamedTensors& next);
  // Values update() had to copy because the step did not write them in place.
  int64_t copies() const { return copies_; }
  // Copies these values into the storage (a resume); the same checks as update().
  void assign(const NamedTensors& values);
  // Copies one host value into variable `name`'s storage (a resume filling the state one tensor
  // at a time); keel::Error when there is no such variable or its type differs.
  void assign(const std::string& name, const Array& value);
  // Each variable's device address; constant for the variable's life.
  std::map<std::string, const void*> storage() const;
  size_t size() const { return buffers_.size(); }

 private:
  int64_t copy_in(const NamedTensors& values);  // how many values were not already in place

  std::map<std::string, Buffer> buffers_;
  int64_t copies_ = 0;
};

}  // namespace keel::nn
