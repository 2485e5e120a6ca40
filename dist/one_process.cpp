// The communicator of a process that is its own world: every collective is a copy.
#include <cstring>

#include "dist/communicator.h"

namespace keel::dist {
namespace {

class OneProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_gather(const void* in, void* out, size_t bytes) override {
    if (bytes > 0 && in != out) std::memmove(out, in, bytes);
  }
  void all_to_all(const void* in, void* out, size_t bytes) override {
    if (bytes > 0 && in != out) std::memmove(out, in, bytes);
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<OneProcess>(); }
};

}  // namespace

std::unique_ptr<Communicator> one_process_communicator() {
  return std::make_unique<OneProcess>();
}

}  // namespace keel::dist
