#pragma once
// A benchmark's command line. CLI11 is header-only, and each benchmark that used it directly
// generated CLI11's code again (two thirds of a benchmark's compile time); behind this class it
// is compiled once, in command_line.cpp.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace keel::bench {

/// The options of one benchmark, parsed as CLI11 parses them (its messages and exit statuses).
class CommandLine {
 public:
  /// `description` heads --help.
  explicit CommandLine(const std::string& description);
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  /// --flag N with N > 0.
  void positive(const std::string& flag, int& value, const std::string& help);
  /// --flag N with lo <= N <= hi.
  void in_range(const std::string& flag, int& value, int lo, int hi, const std::string& help);
  /// --flag N with lo <= N <= hi.
  void in_range(const std::string& flag, int64_t& value, int64_t lo, int64_t hi,
                const std::string& help);
  /// --flag X with lo <= X <= hi.
  void in_range(const std::string& flag, double& value, double lo, double hi,
                const std::string& help);
  /// --flag A,B,... (or --flag A B ...), each in [lo, hi]; exactly `count` of them when count > 0.
  void list_in_range(const std::string& flag, std::vector<int64_t>& values, int64_t lo, int64_t hi,
                     const std::string& help, int count = 0);
  /// --flag NAME, one of `allowed`.
  void one_of(const std::string& flag, std::string& value, const std::vector<std::string>& allowed,
              const std::string& help);
  /// --flag A,B,..., each one of `allowed`.
  void list_of(const std::string& flag, std::vector<std::string>& values,
               const std::vector<std::string>& allowed, const std::string& help);

  /// Parses argv into the values. std::nullopt: run the benchmark. Otherwise the status to exit
  /// with: 0 after --help was printed, or CLI11's status for a bad argument (its message printed
  /// to stderr).
  std::optional<int> parse(int argc, char** argv);

 private:
  std::unique_ptr<CLI::App> app_;
};

}  // namespace keel::bench
