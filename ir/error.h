#pragma once
/// @file
/// One exception type; messages start with the API in brackets and say what to do.
#include <stdexcept>
#include <string>

namespace keel {

/// keel's exception: the message starts with the API in brackets ("[cache] ...") and says what
/// to do.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bad input from outside (a file, an argument): the CLI exits with code 2 on these.
class InputError : public Error {
 public:
  using Error::Error;
};

/// Work cut short by a stop request (a child process killed by files::interrupt_children): not
/// a failure, so callers that asked for the stop report it as one.
class Stopped : public Error {
 public:
  using Error::Error;
};

}  // namespace keel
