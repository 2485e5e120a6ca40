#pragma once
/// @file
/// Flattening of compile() arguments and results into tensor leaves plus a structure string.
/// Plain numbers are rejected at compile time: a value must never become part of a signature.
#include <array>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "trace/scalar.h"
#include "trace/tensor.h"

namespace keel {

/// How a compile() argument or result of type T flattens into tensor leaves plus a structure
/// string, and is rebuilt from them. Specialise it for your structs.
template <class T>
struct Tree {
  static_assert(sizeof(T) == 0,
                "keel::compile arguments and results must be Tensor, Scalar, or std::vector, "
                "std::array, std::pair, std::tuple, std::map<std::string, T> of them; pass a "
                "number that changes as keel::Scalar, and specialise keel::Tree for your structs");
};

/// A Tensor: one leaf, structure "T".
template <>
struct Tree<Tensor> {
  /// Appends `t` to `leaves` and its structure to `s`.
  static void flatten(const Tensor& t, std::vector<Tensor>& leaves, std::string& s) {
    s += 'T';
    leaves.push_back(t);
  }
  /// The leaf at `i`, advancing `i`.
  static Tensor unflatten(const Tensor&, std::span<const Tensor> leaves, size_t& i) {
    return leaves[i++];
  }
};

/// A Scalar: one leaf, structure "S".
template <>
struct Tree<Scalar> {
  /// Appends `t` to `leaves` and its structure to `s`.
  static void flatten(const Scalar& t, std::vector<Tensor>& leaves, std::string& s) {
    s += 'S';
    leaves.push_back(t);
  }
  /// The leaf at `i` as a Scalar, advancing `i`.
  static Scalar unflatten(const Scalar&, std::span<const Tensor> leaves, size_t& i) {
    return Scalar(leaves[i++]);
  }
};

/// A vector: its elements in order, structure "[n:...]".
template <class T>
struct Tree<std::vector<T>> {
  /// Appends the leaves of every element to `leaves` and the structure to `s`.
  static void flatten(const std::vector<T>& v, std::vector<Tensor>& leaves, std::string& s) {
    s += '[' + std::to_string(v.size()) + ':';
    for (const T& x : v) Tree<T>::flatten(x, leaves, s);
    s += ']';
  }
  /// A vector shaped like `like`, from the leaves at `i` on; advances `i` past them.
  static std::vector<T> unflatten(const std::vector<T>& like, std::span<const Tensor> leaves,
                                  size_t& i) {
    std::vector<T> out;
    out.reserve(like.size());
    for (const T& x : like) out.push_back(Tree<T>::unflatten(x, leaves, i));
    return out;
  }
};

/// An array: its elements in order, structure `<N:...>`.
template <class T, size_t N>
struct Tree<std::array<T, N>> {
  /// Appends the leaves of every element to `leaves` and the structure to `s`.
  static void flatten(const std::array<T, N>& v, std::vector<Tensor>& leaves, std::string& s) {
    s += '<' + std::to_string(N) + ':';
    for (const T& x : v) Tree<T>::flatten(x, leaves, s);
    s += '>';
  }
  /// An array shaped like `like`, from the leaves at `i` on; advances `i` past them.
  static std::array<T, N> unflatten(const std::array<T, N>& like, std::span<const Tensor> leaves,
                                    size_t& i) {
    std::array<T, N> out = like;
    for (size_t k = 0; k < N; ++k) out[k] = Tree<T>::unflatten(like[k], leaves, i);
    return out;
  }
};

/// A map by string key: its values in key order, structure "{key=...,}".
template <class T>
struct Tree<std::map<std::string, T>> {
  /// The map type.
  using M = std::map<std::string, T>;
  /// Appends the leaves of every value to `leaves` and the keys and structure to `s`.
  static void flatten(const M& m, std::vector<Tensor>& leaves, std::string& s) {
    s += '{';
    for (const auto& [k, v] : m) {
      s += k + '=';
      Tree<T>::flatten(v, leaves, s);
      s += ',';
    }
    s += '}';
  }
  /// A map with `like`'s keys, from the leaves at `i` on; advances `i` past them.
  static M unflatten(const M& like, std::span<const Tensor> leaves, size_t& i) {
    M out;
    for (const auto& [k, v] : like) out.emplace(k, Tree<T>::unflatten(v, leaves, i));
    return out;
  }
};

/// A tuple: its elements in order, structure "(...)".
template <class... Ts>
struct Tree<std::tuple<Ts...>> {
  /// The tuple type.
  using Tup = std::tuple<Ts...>;
  /// Appends the leaves of every element to `leaves` and the structure to `s`.
  static void flatten(const Tup& t, std::vector<Tensor>& leaves, std::string& s) {
    s += '(';
    std::apply(
        [&](const auto&... x) { (Tree<std::decay_t<decltype(x)>>::flatten(x, leaves, s), ...); },
        t);
    s += ')';
  }
  /// A tuple shaped like `like`, from the leaves at `i` on; advances `i` past them.
  static Tup unflatten(const Tup& like, std::span<const Tensor> leaves, size_t& i) {
    // Braced init keeps left-to-right order, so leaves are consumed in flatten order.
    return std::apply(
        [&](const auto&... x) {
          return Tup{Tree<std::decay_t<decltype(x)>>::unflatten(x, leaves, i)...};
        },
        like);
  }
};

/// A pair: first then second, structure "(...)".
template <class A, class B>
struct Tree<std::pair<A, B>> {
  /// Appends the leaves of both members to `leaves` and the structure to `s`.
  static void flatten(const std::pair<A, B>& p, std::vector<Tensor>& leaves, std::string& s) {
    s += '(';
    Tree<A>::flatten(p.first, leaves, s);
    Tree<B>::flatten(p.second, leaves, s);
    s += ')';
  }
  /// A pair shaped like `like`, from the leaves at `i` on; advances `i` past them.
  static std::pair<A, B> unflatten(const std::pair<A, B>& like, std::span<const Tensor> leaves,
                                   size_t& i) {
    A a = Tree<A>::unflatten(like.first, leaves, i);
    B b = Tree<B>::unflatten(like.second, leaves, i);
    return {std::move(a), std::move(b)};
  }
};

}  // namespace keel
