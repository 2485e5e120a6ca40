// Strings of any lengths from every process: lengths first, then blocks of the longest.
#include <algorithm>
#include <cstdint>

#include "dist/communicator.h"

namespace keel::dist {

std::vector<std::string> all_gather_text(Communicator& comm, const std::string& mine) {
  const auto n = static_cast<size_t>(comm.size());
  const uint64_t length = mine.size();
  std::vector<uint64_t> lengths(n);
  comm.all_gather(&length, lengths.data(), sizeof length);
  uint64_t longest = 0;
  for (uint64_t l : lengths) longest = std::max(longest, l);
  std::string padded = mine;
  padded.resize(longest);
  std::string all(longest * n, '\0');
  comm.all_gather(padded.data(), all.data(), longest);
  std::vector<std::string> out;
  for (size_t r = 0; r < n; ++r) out.push_back(all.substr(r * longest, lengths[r]));
  return out;
}

}  // namespace keel::dist
