#pragma once
/// @file
/// A value held by a device: an opaque, reference-counted handle (PJRT's PjRtBuffer), and the
/// event that says when asynchronous work on it (a transfer, a program) has finished. Each
/// backend implements DeviceMemory for its devices; the rooms above hold only the handle.
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ir/array.h"

namespace keel {

/// Whether asynchronous work (a transfer, a program run) has finished. Copies share one state.
class Event {
 public:
  /// An event that has already happened: what a synchronous device returns.
  Event();
  /// An event that happens when complete() is called on it or a copy of it.
  static Event pending();
  /// Marks the work finished; `failure` (when not null) is rethrown by wait(). Once only.
  void complete(std::exception_ptr failure = nullptr) const;
  bool done() const;  ///< whether the work has finished, without blocking
  /// Blocks until the work has finished; rethrows its failure.
  void wait() const;
  /// When complete() was called, as CUDA's events time device work; the clock's epoch for an
  /// event made complete. Read it once done().
  std::chrono::steady_clock::time_point completed_at() const;

 private:
  struct State;
  explicit Event(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

/// A host copy of a device's value: read `value` once `done` has happened.
struct HostCopy {
  Array value;  ///< the value on the host: read it after `done`
  Event done;   ///< when the copy is there
  /// The value, once the copy is there (waits for `done`; rethrows the copy's failure).
  const Array& get() const {
    done.wait();
    return value;
  }
};

/// The memory a device holds for one value. A backend subclasses it; nothing above the backend
/// sees its contents except through copies to and from the host.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual std::string device() const = 0;  ///< where it lives, "kind:id" ("cpu:0")
  /// The device address of its first byte: equal for two handles of one memory.
  virtual const void* address() const = 0;
  /// Starts a host copy of the value, of `dtype` and `shape`, ordered after `after` (the value's
  /// last write) without waiting for it; memory that is the host's may return a view of itself
  /// instead (PJRT's zero-copy), there once `after` is, which the caller must not write.
  virtual HostCopy to_host(DType dtype, const Shape& shape, const Event& after) const = 0;
  /// Starts overwriting the value with `host` (of the value's type).
  virtual Event copy_from_host(const Array& host) = 0;
  /// Starts overwriting the value with `other`'s, on the same device.
  virtual Event copy_from(const DeviceMemory& other) = 0;
  /// New memory on the same device holding a copy of the value, and when the copy is there.
  virtual std::pair<std::shared_ptr<DeviceMemory>, Event> copy() const = 0;
};

/// A value held by a device: its type, its memory and when the value is there. Copies of a
/// handle share all three, as Arrays share their bytes: a write through one is waited for by
/// every reader.
class Buffer {
 public:
  Buffer() = default;
  /// `memory` holding a value of `dtype` and `shape`, there once `ready` has happened.
  Buffer(DType dtype, Shape shape, std::shared_ptr<DeviceMemory> memory, Event ready = {});

  bool defined() const { return state_ != nullptr; }  ///< false when default-constructed
  DType dtype() const;                                ///< element type
  const Shape& shape() const;                         ///< dimensions
  int64_t nbytes() const;                             ///< elements x element size
  std::string device() const;                         ///< "cpu:0"
  const void* address() const;  ///< the memory's device address: equal for one memory
  Event ready() const;          ///< when the last write to the value (its producer's) finishes
  /// Records a write to the memory that finishes with `done` (a program writing a donated
  /// buffer): every later reader, through any handle, waits for it. The writer orders itself
  /// after earlier readers (a device runs its programs in order).
  void written(Event done) const;
  /// Records a read of the memory that finishes with `done` (a program taking it as an input):
  /// a later write from the host (assign_from_host, assign_from) waits for it.
  void read_by(Event done) const;

  /// Starts a host copy of the value, ordered after ready() and returning at once, as PJRT's
  /// ToHostBuffer; wait on `done` before reading it. A host-memory device hands back a view.
  HostCopy to_host() const;
  /// A copy of the value in new memory on the same device.
  Buffer copy() const;
  /// Starts overwriting the value with `host` (same dtype and shape): a host-to-device transfer,
  /// once the value's last write and every read of it still running have finished.
  Event assign_from_host(const Array& host) const;
  /// Starts overwriting the value with `other`'s (same dtype, shape and device), ordered as
  /// assign_from_host.
  Event assign_from(const Buffer& other) const;

  /// The memory as the backend's type `M`, or null when another backend made it.
  template <class M>
  M* memory_as() const {
    return state_ ? dynamic_cast<M*>(state_->memory.get()) : nullptr;
  }

 private:
  struct State {
    DType dtype = DType::f32;
    Shape shape;
    std::shared_ptr<DeviceMemory> memory;
    mutable std::mutex mu;  ///< guards `ready` and `reads`
    Event ready;
    std::vector<Event> reads;  ///< reads that may still run; finished ones are dropped
  };
  const State& state(const char* what) const;  // keel::Error on an empty handle
  void wait_for_reads_and_writes() const;      // before the host writes the memory

  std::shared_ptr<State> state_;
};

}  // namespace keel
