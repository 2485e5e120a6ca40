#include "backend/cuda/device_executable.h"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <map>

#include "backend/cuda/blas_product.h"
#include "ir/error.h"

namespace keel::cuda {

namespace {

// The largest power of two (at most 256) dividing a product operand's address in every batch
// entry: its buffer is 512-byte aligned (the allocator's blocks), the rest is offsets.
int alignment_of(const Slot& slot, const MatrixLayout* layout, DType t) {
  int64_t offset = slot.byte_offset;
  int64_t stride = 0;
  if (layout) {
    const auto esize = static_cast<int64_t>(dtype_size(t));
    offset += layout->batch_offsets.empty() ? 0 : layout->batch_offsets.front() * esize;
    if (layout->batch_offsets.size() > 1) {
      stride = (layout->batch_offsets[1] - layout->batch_offsets[0]) * esize;
    }
  }
  int align = 256;
  while (align > 1 && (offset % align != 0 || stride % align != 0)) align /= 2;
  return align;
}

// Everything a product's plan depends on.
std::string plan_key(const GemmCall& c, const std::array<int, 4>& alignment) {
  auto layout = [](const MatrixLayout& l) {
    return fmt::format("{}x{}/{},{}/[{}]", l.rows, l.cols, l.row_stride, l.col_stride,
                       fmt::join(l.batch_offsets, ","));
  };
  return fmt::format("{} {} {} {} {} {} {} {} {} {} {} [{}]", c.batch, c.m, c.n, c.k, layout(c.a),
                     layout(c.b), dtype_name(c.operand), dtype_name(c.result),
                     static_cast<int>(c.addend), static_cast<int>(c.activation), c.aux,
                     fmt::join(alignment, ","));
}

}  // namespace

LoadedExecutable::LoadedExecutable(std::shared_ptr<DeviceState> state, CompiledProgram compiled)
    : state_(std::move(state)), compiled_(std::move(compiled)) {
  const CudaProgram& p = compiled_.program;
  Gpu& gpu = *state_->gpu;
  std::lock_guard lock(state_->stream);
  try {
    if (p.arena_bytes > 0) {  // first: a program the device cannot hold loads nothing
      arena_ = std::make_unique<GpuMemory>(state_, p.arena_bytes,
                                           fmt::format("the arena of program {}", p.graph_name));
    }
    module_ = gpu.load_module(compiled_);
    kernels_.resize(p.launches.size());
    plans_.resize(p.launches.size());
    std::map<std::string, GemmHandle> plan_of;
    std::map<std::string, KernelHandle> by_name;
    for (size_t i = 0; i < p.launches.size(); ++i) {
      const Launch& l = p.launches[i];
      if (l.gemm) {
        const GemmCall& c = *l.gemm;
        // c and a matrix addend: batch entries m * n elements apart.
        const MatrixLayout entries{
            c.m, c.n, c.n, 1,
            c.batch > 1 ? std::vector<int64_t>{0, c.m * c.n} : std::vector<int64_t>{0}};
        const std::array<int, 4> alignment{
            alignment_of(l.args[0], &c.a, c.operand), alignment_of(l.args[1], &c.b, c.operand),
            alignment_of(l.args[2], &entries, c.result),
            c.addend != GemmCall::Addend::none ? alignment_of(l.args[3], &entries, c.result) : 256};
        // A scan replays its body's products per iteration: one plan per distinct call.
        auto [plan, fresh] = plan_of.try_emplace(plan_key(c, alignment));
        if (fresh) {
          plan->second = gpu.plan_gemm(c, alignment);
          distinct_plans_.push_back(plan->second);
          ++state_->product_plans;
        }
        plans_[i] = plan->second;
        continue;
      }
      auto [it, fresh] = by_name.try_emplace(l.kernel);
      if (fresh) it->second = gpu.kernel(module_, l.kernel);
      kernels_[i] = it->second;
    }
  } catch (...) {
    for (GemmHandle h : distinct_plans_) gpu.release_gemm(h);
    if (module_) gpu.unload_module(module_);
    throw;
  }
}

LoadedExecutable::~LoadedExecutable() {
  Gpu& gpu = *state_->gpu;
  std::lock_guard lock(state_->stream);
  try {
    gpu.synchronize();      // its graphs may still run: their kernels live in the module
  } catch (const Error&) {  // a failed device: release all the same
  }
  for (RecordedGraph& g : graphs_) gpu.release_graph(g.graph);
  for (GemmHandle h : distinct_plans_) gpu.release_gemm(h);
  gpu.unload_module(module_);
}

void LoadedExecutable::record(std::span<const DevicePointer> inputs,
                              std::span<const DevicePointer> outputs) {
  const CudaProgram& p = compiled_.program;
  Gpu& gpu = *state_->gpu;
  const DevicePointer arena = arena_ ? arena_->pointer() : 0;
  auto address = [&](const Slot& s) -> DevicePointer {
    const auto offset = static_cast<DevicePointer>(s.byte_offset);
    switch (s.kind) {
      case Slot::Kind::input:
        return inputs[static_cast<size_t>(s.index)] + offset;
      case Slot::Kind::output:
        return outputs[static_cast<size_t>(s.index)] + offset;
      case Slot::Kind::arena:
        return arena + offset;
    }
    return 0;
  };
  auto copy = [&](const Copy& c) {
    if (c.bytes > 0) gpu.copy_on_device(address(c.to), address(c.from), c.bytes);
  };
  for (const Copy& c : p.copies_before) copy(c);
  std::vector<DevicePointer> args;
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& l = p.launches[i];
    args.clear();
    for (const Slot& s : l.args) args.push_back(address(s));
    if (!l.gemm) {
      gpu.launch(kernels_[i], l, args);
      continue;
    }
    const BlasProduct product = blas_product(*l.gemm);
    if (product.zero_fill()) {
      gpu.zero(args[2], l.gemm->batch * l.gemm->m * l.gemm->n *
                            static_cast<int64_t>(dtype_size(l.gemm->result)));
    } else if (!product.empty()) {
      const GemmCall& c = *l.gemm;
      gpu.gemm(plans_[i], args[0], args[1], args[2],
               c.addend == GemmCall::Addend::none ? 0 : args[3], c.aux ? args.back() : 0);
    }
  }
  for (const Copy& c : p.copies_after) copy(c);
}

std::vector<Buffer> LoadedExecutable::execute(std::span<const Buffer> args) {
  const CudaProgram& p = compiled_.program;
  if (args.size() != p.inputs.size()) {
    throw Error(fmt::format("[backend.cuda] {} takes {} inputs, got {}", p.graph_name,
                            p.inputs.size(), args.size()));
  }
  std::vector<DevicePointer> key;
  for (size_t i = 0; i < args.size(); ++i) {
    const GpuMemory& m = gpu_memory(args[i], *state_);
    if (args[i].dtype() != p.inputs[i].dtype || args[i].shape() != p.inputs[i].shape ||
        m.bytes() < p.inputs[i].bytes()) {
      throw Error(fmt::format("[backend.cuda] input {} of {} is {}, expected {}", i, p.graph_name,
                              TensorType{args[i].dtype(), args[i].shape()}.str(),
                              p.inputs[i].str()));
    }
    key.push_back(m.pointer());
  }
  // A donated input is overwritten while the program runs: no other input may be its memory.
  const auto alias = [&](size_t k) { return p.aliases.empty() ? -1 : p.aliases[k]; };
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const int32_t a = alias(k);
    if (a < 0 || p.inputs[static_cast<size_t>(a)].bytes() == 0) continue;
    for (size_t j = 0; j < args.size(); ++j) {
      if (j != static_cast<size_t>(a) && key[j] == key[static_cast<size_t>(a)]) {
        throw Error(fmt::format(
            "[backend.cuda] program '{}': input {} is donated (written in place) and input {} "
            "is the same buffer; pass a copy of one",
            p.graph_name, a, j));
      }
    }
  }
  // A donated output is its input's memory; the others get blocks of their own.
  std::vector<std::shared_ptr<GpuMemory>> outputs(p.outputs.size());
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    if (alias(i) >= 0) {
      key.push_back(key[static_cast<size_t>(alias(i))]);
      continue;
    }
    outputs[i] = std::make_shared<GpuMemory>(
        state_, p.outputs[i].bytes(), fmt::format("output {} of program {}", i, p.graph_name));
    key.push_back(outputs[i]->pointer());
  }
  Gpu& gpu = *state_->gpu;
  Event done;
  {
    std::lock_guard lock(state_->stream);
    // The graph recorded for these addresses; else a new one while fewer than kGraphs exist,
    // else the least recently used one, updated to them.
    auto it = std::find_if(graphs_.begin(), graphs_.end(),
                           [&](const RecordedGraph& g) { return g.addresses == key; });
    if (it == graphs_.end()) {
      if (graphs_.size() < kGraphs) {
        graphs_.push_back(RecordedGraph{});
        it = std::prev(graphs_.end());
      } else {
        it = std::min_element(
            graphs_.begin(), graphs_.end(),
            [](const RecordedGraph& x, const RecordedGraph& y) { return x.last_run < y.last_run; });
      }
      const std::span<const DevicePointer> all(key);
      gpu.begin_capture();
      try {
        record(all.first(args.size()), all.subspan(args.size()));
      } catch (...) {
        gpu.abort_capture();
        if (!it->graph.graph) graphs_.erase(it);
        throw;
      }
      ++(gpu.end_capture(it->graph) ? state_->graph_updates : state_->graph_captures);
      it->addresses = key;
    }
    it->last_run = ++runs_;
    gpu.replay(it->graph);
    ++state_->graph_replays;
    done = state_->completions.after(gpu.mark());
  }
  std::vector<char> donated(args.size(), 0);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (alias(i) >= 0) donated[static_cast<size_t>(alias(i))] = 1;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (donated[i]) {
      args[i].written(done);
    } else {
      args[i].read_by(done);
    }
  }
  std::vector<Buffer> out;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (alias(i) >= 0) {
      out.push_back(args[static_cast<size_t>(alias(i))]);
    } else {
      out.emplace_back(p.outputs[i].dtype, p.outputs[i].shape, std::move(outputs[i]), done);
    }
  }
  return out;
}

}  // namespace keel::cuda
