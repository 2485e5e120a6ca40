#pragma once
/// @file
/// keel::bucketed: a compiled function whose inputs vary in length along one axis, padded to a
/// few lengths (buckets) chosen from the lengths it has seen, so that drifting lengths cost at
/// most a budget of programs instead of one compile each (XLA's padding buckets, chosen for the
/// caller). The function gets a mask of the real positions; results are sliced back, so a
/// function that masks what it reduces returns what the unpadded call would.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "trace/compile.h"

namespace keel {

/// At most `max_buckets` lengths, the largest `top` (>= every length), minimising the padded
/// positions sum(bucket(l) - l) over `lengths` (each in 1..top): an exact dynamic programme.
std::vector<int64_t> choose_buckets(std::span<const int64_t> lengths, int64_t max_buckets,
                                    int64_t top);

/// What a BucketPlan has done so far.
struct BucketStats {
  int64_t calls = 0;                ///< calls counted by bucket_for
  int64_t real_positions = 0;       ///< sum of the calls' lengths
  int64_t padded_positions = 0;     ///< sum of (bucket - length)
  std::vector<int64_t> buckets;     ///< chosen so far, ascending
  std::vector<int64_t> used;        ///< the buckets calls went to, ascending: a program each
  double padding_fraction() const;  ///< padded / (real + padded); 0 before any call
};

/// The online choice. Until `warmup` lengths were seen every length goes to `max_length` (one
/// program covers all); then the other max_programs - 1 buckets are chosen once from the lengths
/// seen and kept, since a compiled program is never taken back. plan() chooses from lengths
/// known ahead instead (whole documents, a list of prompts).
class BucketPlan {
 public:
  /// A plan for calls of length 1..max_length, with at most `max_programs` buckets. InputError
  /// "[bucketed] ..." unless max_length >= 1 and max_programs >= 1.
  BucketPlan(int64_t max_length, int64_t max_programs, int64_t warmup = 16);
  /// The bucket for a call of this length, counted in the stats; InputError outside
  /// 1..max_length.
  int64_t bucket_for(int64_t length);
  /// Chooses the buckets from lengths known ahead; buckets in use stay.
  void plan(std::span<const int64_t> lengths);
  BucketStats stats() const { return stats_; }  ///< calls, padding and buckets so far
  /// The longest call allowed, also the top bucket.
  int64_t max_length() const { return max_length_; }

 private:
  int64_t max_length_, max_programs_, warmup_;
  bool planned_ = false;
  std::vector<int64_t> seen_;
  BucketStats stats_;
};

/// How keel::bucketed pads and how many programs it may make.
struct BucketOptions {
  int axis = 1;               ///< the axis whose length varies, in every padded argument
  int64_t max_length = 0;     ///< the longest call allowed (required)
  int64_t max_programs = 0;   ///< 0: the JIT's budget (shape_guard.max_programs_per_function)
  int64_t warmup = 16;        ///< calls seen before the buckets are chosen
  std::vector<int> unpadded;  ///< argument indices that do not vary (kept as they are)
  CompileOptions compile;     ///< how the padded function is compiled
};

/// fn(args padded to the bucket, valid): `valid` is f32 [bucket], 1 at real positions and 0 at
/// padding; fn must mask what it reduces over the axis. Results whose size along the axis is the
/// bucket are sliced back to the call's length.
using BucketedBody =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& args, const Tensor& valid)>;

/// A compiled function that pads its inputs to a bucket length; made by keel::bucketed.
class BucketedFn {
 public:
  /// As keel::bucketed.
  BucketedFn(std::string name, BucketedBody body, BucketOptions options, SourceLoc loc);
  /// Pads the varying arguments to the call's bucket, runs that bucket's program and slices the
  /// results back; InputError when the arguments disagree on the length.
  std::vector<Tensor> operator()(const std::vector<Tensor>& args);
  /// Lengths known ahead: the buckets are chosen from them now.
  void plan(std::span<const int64_t> lengths) { plan_->plan(lengths); }
  BucketStats stats() const { return plan_->stats(); }  ///< the plan's stats
  /// Programs traced so far.
  int64_t programs() const { return static_cast<int64_t>(fn_.programs().size()); }

 private:
  BucketOptions options_;
  std::shared_ptr<BucketPlan> plan_;  ///< made with the JIT's budget (or max_programs)
  CompiledFn<std::vector<Tensor>(std::vector<Tensor>, Tensor)> fn_;
};

/// Compiles `body` as a function whose inputs are padded to buckets along options.axis (see the
/// file comment); options.max_length is required.
BucketedFn bucketed(std::string name, BucketedBody body, BucketOptions options,
                    SourceLoc loc = SourceLoc::current());

/// Host copies along `axis`: `a` padded with zeros, or cut, to `length` there.
Array resize_axis(const Array& a, int axis, int64_t length);

}  // namespace keel
