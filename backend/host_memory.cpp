#include "backend/host_memory.h"

#include <fmt/format.h>

#include <cstring>

#include "ir/error.h"

namespace keel::backend {

HostCopy HostDeviceMemory::to_host(DType dtype, const Shape& shape, const Event& after) const {
  if (dtype != value_.dtype() || shape != value_.shape()) {
    throw Error(
        fmt::format("[backend] a host copy of {} read as {}{}; read a buffer as its own type",
                    value_.str(0), dtype_name(dtype), shape_str(shape)));
  }
  return {value_, after};  // the value itself: there once its last write is
}

Event HostDeviceMemory::copy_from_host(const Array& host) {
  if (host.data() != value_.data()) std::memcpy(value_.data(), host.data(), value_.nbytes());
  return Event();
}

Event HostDeviceMemory::copy_from(const DeviceMemory& other) {
  const auto* from = dynamic_cast<const HostDeviceMemory*>(&other);
  if (!from) {
    throw Error(
        fmt::format("[backend] a copy into {} from {}, whose memory is not the host's; "
                    "copy through the host (to_host, then to_device)",
                    device(), other.device()));
  }
  return copy_from_host(from->value_);
}

std::pair<std::shared_ptr<DeviceMemory>, Event> HostDeviceMemory::copy() const {
  return {std::make_shared<HostDeviceMemory>(value_.clone(), device_), Event()};
}

Buffer adopt_host_array(Array value, const Device& device, Event ready) {
  const DType dtype = value.dtype();
  Shape shape = value.shape();
  return Buffer(dtype, std::move(shape),
                std::make_shared<HostDeviceMemory>(std::move(value), device), std::move(ready));
}

HostDeviceMemory& host_device_memory(const Buffer& buffer, std::string_view backend) {
  auto* memory = buffer.memory_as<HostDeviceMemory>();
  if (!memory) {
    throw Error(
        fmt::format("[backend.{}] a buffer on {} given to a program whose memory is the "
                    "host's; move it first (to_host, then this client's to_device)",
                    backend, buffer.device()));
  }
  return *memory;
}

Array& host_array(const Buffer& buffer, std::string_view backend) {
  HostDeviceMemory& memory = host_device_memory(buffer, backend);
  buffer.ready().wait();  // a program reads the value only once its last write is done
  return memory.array();
}

Device host_device() {
  return Device{0, "cpu", true};
}

void require_host_device(const Device& device, std::string_view backend, std::string_view client) {
  if (device.kind != "cpu" || device.id != 0) {
    throw Error(fmt::format("[backend.{}] there is no device {}; {} has cpu:0", backend,
                            device.str(), client));
  }
}

}  // namespace keel::backend
