#pragma once
// A CUDA library opened with dlopen when first needed: keel links none of them, so it starts
// and runs its CPU backends where CUDA is absent, and a missing library is a probe line.
#include <string>
#include <vector>

namespace keel::cuda {

class SharedLibrary {
 public:
  // The first of `names` (sonames, then paths) that dlopen accepts; empty() when none did, with
  // error() naming each try.
  explicit SharedLibrary(const std::vector<std::string>& names);
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  // Never closed: a CUDA library registers exit handlers that must stay mapped.
  ~SharedLibrary() = default;

  bool empty() const { return handle_ == nullptr; }
  const std::string& error() const { return error_; }
  const std::string& name() const { return name_; }  // the name that loaded
  // The symbol `symbol`, or null.
  void* find(const char* symbol) const;
  // The symbol `symbol` as a function pointer of type F; throws keel::Error naming the library.
  template <class F>
  F function(const char* symbol) const {
    return reinterpret_cast<F>(require(symbol));
  }

 private:
  void* require(const char* symbol) const;
  void* handle_ = nullptr;
  std::string name_, error_;
};

}  // namespace keel::cuda
