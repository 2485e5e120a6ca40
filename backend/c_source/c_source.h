#pragma once
// What the code generators of the CPU (C++) and CUDA (CUDA C) backends write alike: C spellings
// of types and values, one elementwise op as an expression over its inputs (semantics of
// docs/ops.md, through keel_* helpers each backend's prelude defines), and loop nests over static
// shapes with one stride per access.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/error.h"
#include "ir/graph.h"

namespace keel::c_source {

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error("[backend.codegen] " + fmt::format(f, std::forward<Args>(args)...));
}

// C spellings.
std::string_view storage_type(DType t);          // float, uint16_t, int32_t, int64_t, uint8_t
std::string_view compute_type(DType t);          // bf16 computes as float, bool as uint8_t
std::string literal(const Array& a, int64_t i);  // exact, in compute_type(a.dtype())
// A definition of `a`'s elements as an array `name`: "<qualifiers> <type> name[n] = {...};"
// (the CPU's qualifiers: "alignas(64) const"; CUDA's: "__constant__ const" or "__device__ const").
std::string constant_array(const Array& a, std::string_view name,
                           std::string_view qualifiers = "alignas(64) const");
// `raw` (an element of storage type) as a value of compute type, and back.
std::string load_expr(DType t, const std::string& raw);
std::string store_expr(DType t, const std::string& value);
// The value of an elementwise (or inlined broadcast / stop_gradient) node given its inputs.
std::string value_expr(const Graph& g, const Node& n, const std::vector<std::string>& args);

// keel_idiv32/64 (truncating, 0 on division by zero, MIN / -1 wrapping) and keel_f2i32/64
// (truncating, saturating, NaN and infinities to 0): the text both backends' preludes include.
extern const char* const kIntegerHelpers;

// Loop nests over a static shape: size-1 dims dropped, neighbours merged where every access
// walks them as one, each access with one stride per merged dim (0 when broadcast).
struct Nest {
  std::vector<int64_t> size;
  std::vector<bool> reduced;
  std::vector<std::vector<int64_t>> strides;  // [access][dim]
};
// One buffer a loop reads or writes: row-major over `shape` unless `strides` are given (a view),
// broadcast against the loop's shape from the right.
struct Access {
  Shape shape;
  std::vector<int64_t> strides;  // empty: row-major
};
Nest build_nest(const Shape& loop, const std::vector<bool>& reduced,
                const std::vector<Access>& accesses);
// C expressions for the indices of `dims` (positions into nest.size) held in `counter`,
// row-major: the last dim varies fastest.
std::vector<std::string> split_index(const Nest& nest, const std::vector<size_t>& dims,
                                     const std::string& counter);
// sum idx[k] * strides[dims[k]], simplified; "0" when nothing contributes.
std::string offset_expr(const std::vector<int64_t>& strides, const std::vector<size_t>& dims,
                        const std::vector<std::string>& idx);

}  // namespace keel::c_source
