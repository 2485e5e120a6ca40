#include "trace/bucketed.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "ir/error.h"
#include "trace/ops.h"

namespace keel {
namespace {

constexpr int64_t kDefaultBudget = 8;  // when the JIT sets no cap

// A bucketed function's new signatures are its plan's, which the shape guard does not call drift.
BucketOptions planned(BucketOptions o) {
  o.compile.planned_shapes = true;
  return o;
}

}  // namespace

std::vector<int64_t> choose_buckets(std::span<const int64_t> lengths, int64_t max_buckets,
                                    int64_t top) {
  if (max_buckets < 1) throw InputError("[bucketed] max_buckets must be >= 1");
  // Distinct lengths with their counts; `top` is always a bucket.
  std::map<int64_t, int64_t> count;
  for (int64_t l : lengths) {
    if (l < 1 || l > top) {
      throw InputError(fmt::format("[bucketed] length {} is outside 1..{}", l, top));
    }
    ++count[l];
  }
  count.try_emplace(top, 0);
  std::vector<int64_t> len, cnt;
  for (auto [l, c] : count) {
    len.push_back(l);
    cnt.push_back(c);
  }
  const size_t n = len.size();
  const size_t k = std::min<size_t>(static_cast<size_t>(max_buckets), n);
  // cost(i, j): lengths i..j all padded to len[j]; prefix sums make it O(1).
  std::vector<int64_t> pc(n + 1, 0), pl(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    pc[i + 1] = pc[i] + cnt[i];
    pl[i + 1] = pl[i] + cnt[i] * len[i];
  }
  auto cost = [&](size_t i, size_t j) {
    return len[j] * (pc[j + 1] - pc[i]) - (pl[j + 1] - pl[i]);
  };
  // best[b][j]: least padding of lengths 0..j with b buckets, the last at len[j].
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  std::vector<std::vector<int64_t>> best(k + 1, std::vector<int64_t>(n, kInf));
  std::vector<std::vector<size_t>> from(k + 1, std::vector<size_t>(n, 0));
  for (size_t j = 0; j < n; ++j) best[1][j] = cost(0, j);
  for (size_t b = 2; b <= k; ++b) {
    for (size_t j = b - 1; j < n; ++j) {
      for (size_t i = b - 2; i < j; ++i) {
        const int64_t c = best[b - 1][i] + cost(i + 1, j);
        if (c < best[b][j]) {
          best[b][j] = c;
          from[b][j] = i;
        }
      }
    }
  }
  size_t b = 1;
  for (size_t bb = 1; bb <= k; ++bb) {
    if (best[bb][n - 1] < best[b][n - 1]) b = bb;
  }
  std::vector<int64_t> out;
  for (size_t j = n - 1;; --b) {
    out.push_back(len[j]);
    if (b == 1) break;
    j = from[b][j];
  }
  std::reverse(out.begin(), out.end());
  return out;
}

double BucketStats::padding_fraction() const {
  const int64_t all = real_positions + padded_positions;
  return all == 0 ? 0.0 : double(padded_positions) / double(all);
}

BucketPlan::BucketPlan(int64_t max_length, int64_t max_programs, int64_t warmup)
    : max_length_(max_length), max_programs_(max_programs), warmup_(std::max<int64_t>(warmup, 0)) {
  if (max_length < 1 || max_programs < 1) {
    throw InputError(fmt::format(
        "[bucketed] max_length {} and max_programs {} must both be >= 1; give the longest call "
        "the function may see",
        max_length, max_programs));
  }
}

void BucketPlan::plan(std::span<const int64_t> lengths) {
  // Buckets in use stay (their programs exist); the rest of the budget goes to `lengths`.
  std::vector<int64_t> keep = stats_.buckets;
  const bool has_top = std::find(keep.begin(), keep.end(), max_length_) != keep.end();
  const int64_t room = max_programs_ - static_cast<int64_t>(keep.size()) + (has_top ? 1 : 0);
  if (room > 0) {
    const std::vector<int64_t> chosen = choose_buckets(lengths, room, max_length_);
    keep.insert(keep.end(), chosen.begin(), chosen.end());
  }
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  stats_.buckets = std::move(keep);
  planned_ = true;
}

int64_t BucketPlan::bucket_for(int64_t length) {
  if (length < 1 || length > max_length_) {
    throw InputError(fmt::format("[bucketed] a call of length {} is outside 1..{} (max_length)",
                                 length, max_length_));
  }
  if (!planned_) {
    seen_.push_back(length);
    if (static_cast<int64_t>(seen_.size()) > warmup_) {
      // The top bucket was the warm-up's; the rest of the budget goes to what was seen.
      stats_.buckets = choose_buckets(seen_, max_programs_, max_length_);
      planned_ = true;
      seen_.clear();
    } else if (stats_.buckets.empty()) {
      stats_.buckets = {max_length_};
    }
  }
  const int64_t bucket = *std::lower_bound(stats_.buckets.begin(), stats_.buckets.end(), length);
  auto at = std::lower_bound(stats_.used.begin(), stats_.used.end(), bucket);
  if (at == stats_.used.end() || *at != bucket) stats_.used.insert(at, bucket);
  ++stats_.calls;
  stats_.real_positions += length;
  stats_.padded_positions += bucket - length;
  return bucket;
}

Array resize_axis(const Array& a, int axis, int64_t length) {
  const Shape& s = a.shape();
  if (axis < 0 || axis >= static_cast<int>(s.size())) {
    throw Error(fmt::format("[bucketed] axis {} is outside a rank-{} array", axis, s.size()));
  }
  Shape out_shape = s;
  out_shape[size_t(axis)] = length;
  Array out(a.dtype(), out_shape);
  int64_t outer = 1, inner = int64_t(dtype_size(a.dtype()));
  for (int d = 0; d < axis; ++d) outer *= s[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t from = s[size_t(axis)] * inner, to = length * inner;
  const int64_t copy = std::min(from, to);
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(out.data() + o * to, a.data() + o * from, size_t(copy));
  }
  return out;
}

BucketedFn::BucketedFn(std::string name, BucketedBody body, BucketOptions options, SourceLoc loc)
    : options_(planned(std::move(options))),
      fn_(
          std::move(name),
          [body = std::move(body)](const std::vector<Tensor>& args, const Tensor& valid) {
            return body(args, valid);
          },
          options_.compile, std::move(loc)) {
  std::shared_ptr<Jit> jit = options_.compile.jit ? options_.compile.jit : nullptr;
  int64_t budget = options_.max_programs;
  if (budget <= 0) {
    if (!jit) jit = current_jit();
    budget = jit->program_budget();
    if (budget <= 0) budget = kDefaultBudget;
  }
  plan_ = std::make_shared<BucketPlan>(options_.max_length, budget, options_.warmup);
}

std::vector<Tensor> BucketedFn::operator()(const std::vector<Tensor>& args) {
  const int axis = options_.axis;
  auto padded = [&](size_t i) {
    return std::find(options_.unpadded.begin(), options_.unpadded.end(), int(i)) ==
           options_.unpadded.end();
  };
  int64_t length = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!padded(i)) continue;
    const Shape& s = args[i].shape();
    if (axis >= static_cast<int>(s.size())) {
      throw InputError(fmt::format("[bucketed] '{}': argument {} has rank {}, no axis {}",
                                   fn_.name(), i, s.size(), axis));
    }
    if (length >= 0 && s[size_t(axis)] != length) {
      throw InputError(fmt::format(
          "[bucketed] '{}': argument {} has length {} on axis {}, others {}; list arguments "
          "that do not vary in BucketOptions::unpadded",
          fn_.name(), i, s[size_t(axis)], axis, length));
    }
    length = s[size_t(axis)];
  }
  if (length < 0) throw InputError(fmt::format("[bucketed] '{}': no padded argument", fn_.name()));
  const int64_t bucket = plan_->bucket_for(length);
  std::vector<Tensor> in;
  in.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    in.push_back(padded(i) && bucket != length ? Tensor(resize_axis(args[i].array(), axis, bucket))
                                               : args[i]);
  }
  Array valid(DType::f32, {bucket});
  for (int64_t t = 0; t < length; ++t) valid.set_f64(t, 1.0);
  std::vector<Tensor> out = fn_(in, Tensor(valid));
  if (bucket == length) return out;
  for (Tensor& t : out) {
    const Shape& s = t.shape();
    if (axis < static_cast<int>(s.size()) && s[size_t(axis)] == bucket) {
      t = Tensor(resize_axis(t.array(), axis, length));
    }
  }
  return out;
}

BucketedFn bucketed(std::string name, BucketedBody body, BucketOptions options, SourceLoc loc) {
  return BucketedFn(std::move(name), std::move(body), std::move(options), std::move(loc));
}

}  // namespace keel
