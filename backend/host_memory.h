#pragma once
/// @file
/// The memory of the devices whose programs run on the host (cpu, ref): a buffer adopts an
/// Array's bytes without copying, as PJRT's CPU client does, and the device's statistics are
/// this process's: resident set size (VmRSS), its high-water mark (VmHWM) and what it may use
/// (MemTotal, or a cgroup's lower cap).
#include <string>
#include <string_view>

#include "backend/backend.h"

namespace keel::backend {

/// One host-memory device's value: an Array.
class HostDeviceMemory final : public DeviceMemory {
 public:
  HostDeviceMemory(Array value, Device device)
      : value_(std::move(value)), device_(std::move(device)) {}
  std::string device() const override { return device_.str(); }
  const void* address() const override { return value_.data(); }
  HostCopy to_host(DType dtype, const Shape& shape, const Event& after) const override;
  Event copy_from_host(const Array& host) override;
  Event copy_from(const DeviceMemory& other) override;
  std::pair<std::shared_ptr<DeviceMemory>, Event> copy() const override;

  const Array& array() const { return value_; }  ///< the value, in place
  Array& array() { return value_; }              ///< the value, in place, writable

 private:
  Array value_;
  Device device_;
};

/// `value` on `device`, adopting its bytes: the buffer and the Array share them. `ready`: when
/// the value is there (a program still writing it).
Buffer adopt_host_array(Array value, const Device& device, Event ready = {});
/// The memory of a host-memory buffer, without waiting for its value: for work that orders
/// itself after ready() (a program queued behind its producer). keel::Error naming `backend`
/// when the buffer lives on a device whose memory is not the host's.
HostDeviceMemory& host_device_memory(const Buffer& buffer, std::string_view backend);
/// The Array a host-memory buffer holds, in place, once its last write is done (it waits for
/// ready()). keel::Error naming `backend` when the buffer lives on a device whose memory is not
/// the host's.
Array& host_array(const Buffer& buffer, std::string_view backend);

/// The process's memory use (a host device's).
MemoryStats host_memory_stats();

/// The one device of a host-memory client, cpu:0.
Device host_device();
/// keel::Error naming `client` ("the CPU client", in a message of room `backend`) unless
/// `device` is cpu:0, host_device()'s name.
void require_host_device(const Device& device, std::string_view backend, std::string_view client);

}  // namespace keel::backend
