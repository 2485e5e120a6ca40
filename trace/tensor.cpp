#include "trace/tensor.h"

#include <fmt/format.h>

#include <atomic>

#include "ir/error.h"
#include "trace/startup.h"

namespace keel {

Tensor::Tensor(Array value, SourceLoc loc) {
  note_tensor_created(loc);
  auto impl = std::make_shared<Impl>();
  impl->type = {value.dtype(), value.shape()};
  impl->value = std::move(value);
  impl_ = std::move(impl);
}

Tensor Tensor::held_by_device(Buffer value, SourceLoc loc) {
  note_tensor_created(loc);
  if (!value.defined()) {
    throw Error(
        fmt::format("[trace] a device's value at {} made from an empty buffer; use a "
                    "buffer a backend made",
                    loc.str()));
  }
  auto impl = std::make_shared<Impl>();
  impl->type = {value.dtype(), value.shape()};
  impl->buffer = std::move(value);
  Tensor t;
  t.impl_ = std::move(impl);
  return t;
}

namespace {
std::atomic<int64_t> g_host_reads{0};
std::atomic<int64_t> g_lone_host_reads{0};
}  // namespace

int64_t host_read_count() {
  return g_host_reads.load(std::memory_order_relaxed);
}

int64_t lone_host_read_count() {
  return g_lone_host_reads.load(std::memory_order_relaxed);
}

Tensor Tensor::symbol(std::shared_ptr<TraceContext> ctx, NodeId node) {
  auto impl = std::make_shared<Impl>();
  impl->type = ctx->graph.node(node).type;
  impl->trace = std::move(ctx);
  impl->node = node;
  Tensor t;
  t.impl_ = std::move(impl);
  return t;
}

template <class Impl>
static const Impl* require_defined(const std::shared_ptr<const Impl>& impl) {
  if (!impl) throw Error("[trace] use of an empty keel::Tensor; assign it a value or an op result");
  return impl.get();
}

bool Tensor::is_symbolic() const {
  return require_defined(impl_)->trace != nullptr;
}

const TensorType& Tensor::type() const {
  return require_defined(impl_)->type;
}

bool Tensor::is_held_by_device() const {
  return require_defined(impl_)->buffer.defined();
}

const Array& Tensor::array(SourceLoc loc) const {
  const Impl& impl = readable(loc);
  if (!impl.buffer.defined()) return impl.value;
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
  bool started_here = false;
  const HostCopy& copy = impl.started_copy(&started_here);
  if (started_here) g_lone_host_reads.fetch_add(1, std::memory_order_relaxed);
  return copy.get();
}

const HostCopy& Tensor::Impl::started_copy(bool* started_here) const {
  std::lock_guard lock(copying);
  if (!host_copy) {
    host_copy = buffer.to_host();
    if (started_here) *started_here = true;
  }
  return *host_copy;
}

void Tensor::start_host_copy(SourceLoc loc) const {
  const Impl& impl = readable(loc);
  if (impl.buffer.defined()) impl.started_copy();
}

void start_host_copies(const NamedTensors& tensors, SourceLoc loc) {
  for (const auto& [name, t] : tensors) t.start_host_copy(loc);
}

void start_host_copies(std::initializer_list<Tensor> tensors, SourceLoc loc) {
  for (const Tensor& t : tensors) t.start_host_copy(loc);
}

const Buffer& Tensor::buffer(SourceLoc loc) const {
  const Impl& impl = readable(loc);
  if (!impl.buffer.defined()) {
    throw Error(fmt::format(
        "[trace] buffer() at {} of a value the host made ({}); place it on a device first "
        "(keel::current_jit()->to_device), or hand it to a compiled function, which does",
        loc.str(), impl.type.str()));
  }
  return impl.buffer;
}

const Tensor::Impl& Tensor::readable(SourceLoc loc) const {
  const auto* impl = require_defined(impl_);
  if (impl->trace) {
    const Node& n = impl->trace->graph.node(impl->node);
    throw Error(fmt::format(
        "[trace] value read at {} of a tensor traced in '{}' (made at {}); a traced program "
        "never syncs to the host: return the tensor from the function and read it after the call",
        loc.str(), impl->trace->function, n.loc.str()));
  }
  if (impl->donated.load(std::memory_order_acquire)) {
    throw Error(fmt::format(
        "[compile] value read at {} of a tensor {}: its storage now holds that call's "
        "result; read the result instead (or copy it, Tensor(t.array().clone()), before the call)",
        loc.str(), impl->donated_by));
  }
  return *impl;
}

double Tensor::item(SourceLoc loc) const {
  const Array& a = array(loc);
  if (a.numel() != 1) {
    throw Error(fmt::format("[trace] item() at {} needs one element; the tensor is {}", loc.str(),
                            type().str()));
  }
  return a.get_f64(0);
}

std::vector<float> Tensor::to_f32(SourceLoc loc) const {
  return array(loc).to_f32();
}

void Tensor::mark_donated(std::string by) const {
  const auto* impl = require_defined(impl_);
  std::call_once(impl->donating, [&] {
    impl->donated_by = std::move(by);
    impl->donated.store(true, std::memory_order_release);
  });
}

bool Tensor::donated() const {
  return require_defined(impl_)->donated.load(std::memory_order_acquire);
}

std::string Tensor::donated_by() const {
  return donated() ? impl_->donated_by : std::string();
}

NodeId Tensor::node() const {
  if (!is_symbolic()) throw Error("[trace] node() of a tensor that is a value, not a symbol");
  return impl_->node;
}

const std::shared_ptr<TraceContext>& Tensor::trace() const {
  if (!is_symbolic()) throw Error("[trace] trace() of a tensor that is a value, not a symbol");
  return impl_->trace;
}

}  // namespace keel
