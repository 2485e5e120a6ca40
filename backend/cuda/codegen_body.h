#pragma once
// The statements of a loop or reduction kernel at one position: each input loaded once, every
// fused value computed into a local, the values the program reads later stored.
#include <string>
#include <vector>

#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen_internal.h"

namespace keel::cuda::gen {

class Body {
 public:
  Body(Kernel& k, const c_source::Unit& u) : k_(k), u_(u) {}
  // Accesses in this order: loads (a strided view with its strides), then stores.
  std::vector<c_source::Access> accesses() const;
  // One-element loads (a constant's as a literal), before the loop.
  std::string hoisted(const std::string& indent);
  // `offset[a]` is the index expression of access a; one-element loads are skipped.
  std::string compute(const std::vector<std::string>& offset, const std::string& indent);
  std::string store(const std::vector<std::string>& offset, const std::string& indent);

 private:
  Kernel& k_;
  const c_source::Unit& u_;
};

}  // namespace keel::cuda::gen
