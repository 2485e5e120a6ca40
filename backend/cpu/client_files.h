#pragma once
// Files of one compile: a work directory (a fresh temporary one unless the options name one)
// that is removed after a successful compile of a temporary directory, and kept otherwise.
#include <string>
#include <string_view>

namespace keel::cpu {

class WorkDir {
 public:
  explicit WorkDir(const std::string& requested);  // empty: mkdtemp under $TMPDIR (or /tmp)
  ~WorkDir();
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;

  const std::string& path() const { return path_; }
  bool temporary() const { return temporary_; }
  void keep() { keep_ = true; }  // a failed compile leaves its source for inspection

 private:
  std::string path_;
  bool temporary_ = false;
  bool keep_ = false;
};

// A graph name as a file name: anything but [A-Za-z0-9._-] becomes '_'.
std::string file_stem(const std::string& name);

}  // namespace keel::cpu
