#include "bench/command_line.h"

#include <CLI/CLI.hpp>

namespace keel::bench {

CommandLine::CommandLine(const std::string& description)
    : app_(std::make_unique<CLI::App>(description)) {}

CommandLine::~CommandLine() = default;

void CommandLine::positive(const std::string& flag, int& value, const std::string& help) {
  app_->add_option(flag, value, help)->check(CLI::PositiveNumber);
}

void CommandLine::in_range(const std::string& flag, int& value, int lo, int hi,
                           const std::string& help) {
  app_->add_option(flag, value, help)->check(CLI::Range(lo, hi));
}

void CommandLine::in_range(const std::string& flag, int64_t& value, int64_t lo, int64_t hi,
                           const std::string& help) {
  app_->add_option(flag, value, help)->check(CLI::Range(lo, hi));
}

void CommandLine::in_range(const std::string& flag, double& value, double lo, double hi,
                           const std::string& help) {
  app_->add_option(flag, value, help)->check(CLI::Range(lo, hi));
}

void CommandLine::list_in_range(const std::string& flag, std::vector<int64_t>& values, int64_t lo,
                                int64_t hi, const std::string& help, int count) {
  CLI::Option* option = app_->add_option(flag, values, help)->delimiter(',');
  if (count > 0) option->expected(count);
  option->check(CLI::Range(lo, hi));
}

void CommandLine::one_of(const std::string& flag, std::string& value,
                         const std::vector<std::string>& allowed, const std::string& help) {
  app_->add_option(flag, value, help)->check(CLI::IsMember(allowed));
}

void CommandLine::list_of(const std::string& flag, std::vector<std::string>& values,
                          const std::vector<std::string>& allowed, const std::string& help) {
  app_->add_option(flag, values, help)->delimiter(',')->check(CLI::IsMember(allowed));
}

std::optional<int> CommandLine::parse(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app_->exit(e);
  }
  return std::nullopt;
}

}  // namespace keel::bench
