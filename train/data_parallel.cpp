#include "train/data_parallel.h"

#include <fmt/format.h>

#include <cstring>

#include "backend/collectives.h"
#include "dist/communicator.h"
#include "dist/deadline.h"
#include "train/accumulate.h"

namespace keel::train {

DataShare data_share(const Runtime& rt) {
  DataShare s;
  s.ranks = std::max<int64_t>(1, rt.mesh().axis_size(kDataAxis));
  s.rank = rt.axis_index(kDataAxis);
  s.leader = rt.place().rank == 0;
  return s;
}

std::vector<Tensor> share_of(const data::Batch& global, const DataShare& share, int64_t K) {
  std::vector<Tensor> out;
  for (const Array& field : global.fields()) {
    Shape s = field.shape();  // [ranks*K, B, T]
    const size_t bytes = field.nbytes() / static_cast<size_t>(share.ranks);
    s[0] = K;
    Array mine(field.dtype(), s);
    std::memcpy(mine.data(), field.data() + static_cast<size_t>(share.rank) * bytes, bytes);
    out.emplace_back(std::move(mine));
  }
  return out;
}

std::vector<float> gather_over_data(const std::vector<float>& mine) {
  backend::Collectives& c = backend::collectives();
  const int64_t n = c.axis_size(kDataAxis);
  std::vector<float> all(mine.size() * static_cast<size_t>(n));
  c.all_gather(kDataAxis, DType::f32, mine.data(), all.data(), static_cast<int64_t>(mine.size()));
  return all;
}

void wait_for_leader(const std::string& what) {
  if (dist::world().size() < 2) return;
  dist::WaitScope scope("the leader's " + what, true);
  dist::world().barrier();
}

int agreed_stop_request(int mine, int64_t step) {
  dist::Communicator& world = dist::world();
  if (world.size() < 2) return mine;
  dist::WaitScope scope(fmt::format("the stop check after step {}", step));
  std::vector<int32_t> all(static_cast<size_t>(world.size()));
  const int32_t own = mine;
  world.all_gather(&own, all.data(), sizeof(own));
  for (int32_t s : all) {
    if (s != 0) return s;
  }
  return 0;
}

std::vector<std::string> gather_text_over_world(const std::string& mine) {
  return dist::all_gather_text(dist::world(), mine);
}

}  // namespace keel::train
