#include "train/data_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

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

AfterStep agree_after_step(int stop, double busy_s, int64_t step) {
  dist::Communicator& world = dist::world();
  if (world.size() < 2) return {stop, {}};
  dist::WaitScope scope(fmt::format("the stop check after step {}", step));
  struct Said {
    int32_t stop;
    float busy_s;
  };
  std::vector<Said> all(static_cast<size_t>(world.size()));
  const Said own{stop, static_cast<float>(busy_s)};
  world.all_gather(&own, all.data(), sizeof(own));
  AfterStep out;
  for (const Said& s : all) {
    if (out.stop == 0) out.stop = s.stop;
    out.busy_s.push_back(s.busy_s);
  }
  return out;
}

std::string straggler_note(const std::vector<double>& busy_ms) {
  if (busy_ms.size() < 2) return "";
  const auto slowest = std::max_element(busy_ms.begin(), busy_ms.end());
  std::vector<double> others;
  for (auto it = busy_ms.begin(); it != busy_ms.end(); ++it) {
    if (it != slowest) others.push_back(*it);
  }
  std::sort(others.begin(), others.end());
  const size_t n = others.size();
  const double median = n % 2 ? others[n / 2] : 0.5 * (others[n / 2 - 1] + others[n / 2]);
  if (*slowest < 1.5 * median || *slowest - median < 10.0) return "";
  const int rank = static_cast<int>(slowest - busy_ms.begin());
  return fmt::format("  slowest: rank {} (host {}), busy {:.0f} ms a step, {:.1f}x the others",
                     rank, dist::host_of_rank(rank), *slowest, *slowest / std::max(median, 1e-9));
}

std::vector<std::string> gather_text_over_world(const std::string& mine) {
  return dist::all_gather_text(dist::world(), mine);
}

std::vector<std::string> gather_text_over_data(const std::string& mine) {
  backend::Collectives& c = backend::collectives();
  const auto n = static_cast<size_t>(c.axis_size(kDataAxis));
  const auto length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(n);
  c.all_gather(kDataAxis, DType::i64, &length, lengths.data(), 1);
  // The texts travel as whole i32 words, padded to the longest.
  const int64_t words = (*std::max_element(lengths.begin(), lengths.end()) + 3) / 4;
  std::vector<std::string> out(n);
  if (words == 0) return out;
  std::vector<int32_t> padded(static_cast<size_t>(words), 0), all(n * static_cast<size_t>(words));
  std::memcpy(padded.data(), mine.data(), mine.size());
  c.all_gather(kDataAxis, DType::i32, padded.data(), all.data(), words);
  for (size_t r = 0; r < n; ++r) {
    out[r].assign(reinterpret_cast<const char*>(all.data() + r * static_cast<size_t>(words)),
                  static_cast<size_t>(lengths[r]));
  }
  return out;
}

namespace {

// A process's bucket figures as one line of text: calls, real and padded positions, the
// buckets, the ones used.
std::string stats_text(const BucketStats& s) {
  return fmt::format("{};{};{};{};{}", s.calls, s.real_positions, s.padded_positions,
                     fmt::join(s.buckets, ","), fmt::join(s.used, ","));
}

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

BucketStats gather_bucket_stats(const BucketStats& mine) {
  BucketStats out;
  std::set<int64_t> used;
  for (const std::string& text : gather_text_over_data(stats_text(mine))) {
    std::istringstream in(text);
    std::vector<std::string> field(5);
    for (std::string& f : field) std::getline(in, f, ';');
    out.calls += std::stoll(field[0]);
    out.real_positions += std::stoll(field[1]);
    out.padded_positions += std::stoll(field[2]);
    out.buckets = numbers(field[3]);  // the same plan on every process
    for (int64_t b : numbers(field[4])) used.insert(b);
  }
  out.used.assign(used.begin(), used.end());
  return out;
}

}  // namespace keel::train
