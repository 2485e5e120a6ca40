#pragma once
/// @file
/// keel::scan: a loop in the program. The body function is traced ONCE into a subgraph; the
/// program runs it `length` times (jax.lax.scan semantics):
///  carry = carries; for i in 0..L-1 (L-1..0 when reverse): (carry, y_i) = fn(carry, xs[i], consts)
///  returns {final carry, ys stacked to [L, ...]}
/// The body sees only its arguments: a tensor of the enclosing trace used inside it is an error
/// naming the line (pass it in `consts`). A C++ number in the body is a constant of the body.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trace/tree.h"

namespace keel {

/// What a remat scan keeps of each iteration for its gradient; the rest is recomputed from the
/// saved carry. The names and meanings are jax.checkpoint_policies'.
enum class RematPolicy : uint8_t {
  nothing_saveable,  ///< only the carry: the backward runs the whole body again
  /// products (dot_general) and attention outputs (with their rows' log-sum-exp): the backward
  /// recomputes only loops and reductions (norms, activations, residual adds)
  dots_saveable,
  /// products without batch dimensions (dense weights): attention and MoE experts are recomputed
  dots_with_no_batch_dims_saveable,
};

/// The policy a name above gives; nullopt for any other name.
std::optional<RematPolicy> remat_policy_named(std::string_view name);
/// The name of `p`, as jax.checkpoint_policies spells it.
std::string_view remat_policy_name(RematPolicy p);

/// How keel::scan loops.
struct ScanOptions {
  bool reverse = false;  ///< iterate from the last slice of the xs to the first
  /// The trip count; -1: the leading dimension of the xs (required when there are no xs).
  int64_t length = -1;
  /// The gradient recomputes each iteration's body from its saved carry instead of keeping the
  /// body's intermediate values: activation memory of one iteration, about a third more compute.
  /// Without it the forward keeps every value computed from a carry that is not a view (and each
  /// attention's log-sum-exp rows), except elementwise values that no product reads and whose
  /// inputs the backward has at hand: the backward loop computes those again.
  bool remat = false;
  /// With remat: what each iteration keeps for the gradient besides its carry.
  RematPolicy remat_policy = RematPolicy::nothing_saveable;
};

/// What keel::scan returns.
struct ScanOut {
  std::vector<Tensor> carries;  ///< the final carries
  std::vector<Tensor> ys;       ///< each body y stacked along a new leading dim of length L
};

/// The body gets (carries, one slice of each xs, consts) and returns (new carries, ys); the new
/// carries must have the carries' types.
using ScanBody = std::function<std::pair<std::vector<Tensor>, std::vector<Tensor>>(
    const std::vector<Tensor>& carries, const std::vector<Tensor>& xs,
    const std::vector<Tensor>& consts)>;

/// The loop of the file comment over lists of tensors: `fn` traced once, run `length` times.
ScanOut scan(const ScanBody& fn, const std::vector<Tensor>& carries, const std::vector<Tensor>& xs,
             const std::vector<Tensor>& consts = {}, ScanOptions options = {},
             SourceLoc loc = SourceLoc::current());

/// The same over keel Tree types (Tensor, vectors, maps, tuples, pairs, ... of tensors):
///   fn(const C& carry, const X& x_slice, const K& consts) -> std::pair<C, Y>
/// returns std::pair<C, Y> with every leaf of Y stacked to [L, ...].
template <class C, class X, class K, class Fn>
auto scan_tree(Fn fn, const C& carries, const X& xs, const K& consts, ScanOptions options = {},
               SourceLoc loc = SourceLoc::current()) {
  using R = std::decay_t<decltype(fn(carries, xs, consts))>;
  using Y = typename R::second_type;
  std::vector<Tensor> c, x, k;
  std::string ignored;
  Tree<C>::flatten(carries, c, ignored);
  Tree<X>::flatten(xs, x, ignored);
  Tree<K>::flatten(consts, k, ignored);
  std::shared_ptr<Y> y_like;
  ScanBody body = [&](const std::vector<Tensor>& bc, const std::vector<Tensor>& bx,
                      const std::vector<Tensor>& bk) {
    size_t i = 0, j = 0, l = 0;
    R r = fn(Tree<C>::unflatten(carries, bc, i), Tree<X>::unflatten(xs, bx, j),
             Tree<K>::unflatten(consts, bk, l));
    std::pair<std::vector<Tensor>, std::vector<Tensor>> out;
    std::string s;
    Tree<C>::flatten(r.first, out.first, s);
    Tree<Y>::flatten(r.second, out.second, s);
    y_like = std::make_shared<Y>(std::move(r.second));
    return out;
  };
  ScanOut out = scan(body, c, x, k, options, loc);
  size_t i = 0, j = 0;
  C final_carry = Tree<C>::unflatten(carries, out.carries, i);
  Y ys = Tree<Y>::unflatten(*y_like, out.ys, j);
  return std::pair<C, Y>{std::move(final_carry), std::move(ys)};
}

}  // namespace keel
