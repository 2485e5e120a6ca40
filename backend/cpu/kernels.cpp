// The kernel table handed to generated code; every entry is a real implementation.
#include "backend/cpu/kernels.h"

#include "backend/cpu/kernel_ops.h"

namespace keel::cpu {

const keel_kernels& kernels() {
  static const keel_kernels table = [] {
    keel_kernels k{};
    k.abi_version = KEEL_ABI_VERSION;
    k.struct_size = sizeof(keel_kernels);
    k.dot_general = &detail::dot_general;
    k.transpose = &detail::transpose;
    k.broadcast = &detail::broadcast;
    k.slice = &detail::slice;
    k.concat = &detail::concat;
    k.pad = &detail::pad;
    k.gather = &detail::gather;
    k.scatter_add = &detail::scatter_add;
    k.one_hot = &detail::one_hot;
    k.iota = &detail::iota;
    k.rng_uniform = &detail::rng_uniform;
    k.reduce = &detail::reduce;
    k.argmax = &detail::argmax;
    k.cumsum = &detail::cumsum;
    k.top_k = &detail::top_k;
    k.copy = &detail::copy;
    k.cast = &detail::cast;
    k.attention = &detail::attention;
    k.attention_grad = &detail::attention_grad;
    k.collective = &detail::collective;
    k.sparse_attention = &detail::sparse_attention;
    return k;
  }();
  return table;
}

}  // namespace keel::cpu
