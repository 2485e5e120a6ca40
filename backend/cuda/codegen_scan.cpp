// A scan on the GPU: the body is generated once, and its launches are replayed per iteration
// with their places moved onto that iteration's slices (xs read, ys written at i * slice bytes),
// so the kernels do not grow with the trip count; the launch table does, and the program's one
// CUDA graph replays it whole. Carries alternate between the result buffer and a spare one in
// the scan's workspace, starting where the last iteration ends in the result buffer, as on the
// CPU.
#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen_internal.h"
#include "ir/scan.h"

namespace keel::cuda::gen {
namespace {

Slot moved(Slot s, int64_t bytes) {
  s.byte_offset += bytes;
  return s;
}

int64_t align_up(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// The widest element dividing the copy's bytes and both places' offsets.
DType copy_word(int64_t bytes, const Slot& from, const Slot& to) {
  const int64_t all = bytes | from.byte_offset | to.byte_offset;
  if (all % 8 == 0) return DType::i64;
  if (all % 4 == 0) return DType::i32;
  if (all % 2 == 0) return DType::bf16;
  return DType::boolean;
}

Launch copy_launch(const passes::Lowered& lowered, const Places& places, Source& source,
                   const Slot& from, const Slot& to, int64_t bytes, std::string what) {
  Kernel k(lowered.graph, lowered.fusion, places, kKernelPlaceholder);
  const DType word = copy_word(bytes, from, to);
  k.launch().block = kBlockThreads;
  k.launch().what = std::move(what);
  const std::string src = k.pointer_to(from, word, false);
  const std::string dst = k.pointer_to(to, word, true);
  std::string text = loop_kernel(k, bytes / static_cast<int64_t>(dtype_size(word)), "",
                                 fmt::format("    {}[i] = {}[i];\n", dst, src));
  return add_kernel(source, k, std::move(text));
}

}  // namespace

void emit_scan(const passes::Lowered& lowered, const Places& places, const c_source::Unit& u,
               const CudaProgram& body, int64_t body_planned, int64_t scratch_at, Source& source,
               Emitted& out) {
  const Graph& g = lowered.graph;
  const passes::FusionPlan& fusion = lowered.fusion;
  const Node& n = g.node(u.root);
  const ScanInfo s = scan_info(n.attrs, n.inputs.size());
  const auto m = static_cast<size_t>(s.carries), nx = static_cast<size_t>(s.xs);
  const int64_t alignment = lowered.options.target.alignment;
  const std::string scan = c_source::describe(g, u.root);
  const int64_t workspace = lowered.memory.offset[static_cast<size_t>(u.root)];
  if (workspace < 0) fail("internal: {} has no planned workspace", scan);
  if (!body.copies_before.empty()) fail("internal: the body of {} donates its inputs", scan);
  // Past the plan, in order: the body's product scratch, then copies of constant inputs.
  const int64_t body_scratch_at = align_up(body_planned, 256);
  int64_t scratch = std::max<int64_t>(0, body.arena_bytes - body_scratch_at);
  Kernel probe(g, fusion, places, "");
  std::vector<Slot> input(n.inputs.size());
  for (size_t q = 0; q < n.inputs.size(); ++q) {
    const NodeId x = n.inputs[q];
    if (fusion.is_view(x) && !fusion.views[static_cast<size_t>(x)].contiguous) {
      fail("internal: input {} of {} is a strided view; the CUDA target folds none into a scan", q,
           scan);
    }
    if (std::optional<Slot> slot = probe.slot_of(x)) {
      input[q] = *slot;
      continue;
    }
    // A constant has no device address to hand over: copied into scratch once.
    const TensorType& t = g.node(x).type;
    input[q] = Slot{Slot::Kind::arena, 0, scratch_at + scratch};
    scratch += align_up(t.bytes(), 256);
    if (t.bytes() == 0) continue;
    Kernel k(g, fusion, places, fmt::format("{}scan{}_in{}", places.prefix, u.root, q));
    k.launch().block = kBlockThreads;
    k.launch().what = fmt::format("input {} of {}", q, scan);
    const NodeId base = fusion.storage_of(x);
    const int64_t at = fusion.is_view(x) ? fusion.views[static_cast<size_t>(x)].offset : 0;
    const std::string src = k.pointer_at(base, at);
    const std::string dst = k.pointer_to(input[q], t.dtype);
    source.kernels +=
        loop_kernel(k, numel(t.shape), "", fmt::format("    {}[i] = {}[i];\n", dst, src));
    out.launches.push_back(k.launch());
  }
  out.scratch_bytes = scratch;
  std::vector<Slot> result(u.stores.size());
  for (size_t r = 0; r < u.stores.size(); ++r) {
    const std::optional<Slot> slot = probe.slot_of(u.stores[r]);
    if (!slot) fail("internal: result {} of {} has no buffer", r, scan);
    result[r] = *slot;
  }
  std::vector<Slot> cur(m), nxt(m);
  int64_t spare = workspace;
  for (size_t k = 0; k < m; ++k) {
    const int64_t bytes = s.body->node(s.body->params()[k]).type.bytes();
    const Slot spare_slot{Slot::Kind::arena, 0, spare};
    spare += align_up(bytes, alignment);  // as passes::scan_carry_bytes
    cur[k] = s.length % 2 == 0 ? result[k] : spare_slot;
    nxt[k] = s.length % 2 == 0 ? spare_slot : result[k];
    if (bytes > 0) {
      out.launches.push_back(copy_launch(lowered, places, source, input[k], cur[k], bytes,
                                         fmt::format("carry {} into {}", k, scan)));
    }
  }
  const int64_t body_arena = spare;
  auto bytes_of = [](const Graph& b, NodeId id) { return b.node(id).type.bytes(); };
  for (int64_t it = 0; it < s.length; ++it) {
    const int64_t i = s.reverse ? s.length - 1 - it : it;
    auto place = [&](const Slot& b) -> Slot {
      const auto index = static_cast<size_t>(b.index);
      switch (b.kind) {
        case Slot::Kind::input:
          if (index < m) return moved(cur[index], b.byte_offset);
          if (index < m + nx) {
            return moved(input[index],
                         i * bytes_of(*s.body, s.body->params()[index]) + b.byte_offset);
          }
          return moved(input[index], b.byte_offset);
        case Slot::Kind::output:
          if (index < m) return moved(nxt[index], b.byte_offset);
          return moved(result[index],
                       i * bytes_of(*s.body, s.body->outputs()[index]) + b.byte_offset);
        case Slot::Kind::arena:
          if (b.byte_offset < body_scratch_at) return moved(b, body_arena);
          return Slot{Slot::Kind::arena, 0, scratch_at + b.byte_offset - body_scratch_at};
      }
      return b;
    };
    for (const Launch& l : body.launches) {
      Launch moved_launch = l;
      for (Slot& a : moved_launch.args) a = place(a);
      moved_launch.what = fmt::format("{} (iteration {} of {})", l.what, i, scan);
      out.launches.push_back(std::move(moved_launch));
    }
    for (const Copy& c : body.copies_after) {
      out.launches.push_back(
          copy_launch(lowered, places, source, place(c.from), place(c.to), c.bytes,
                      fmt::format("body output {} (iteration {} of {})", c.to.index, i, scan)));
    }
    std::swap(cur, nxt);
  }
}

}  // namespace keel::cuda::gen
