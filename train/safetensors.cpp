// safetensors writer (streamed through a temporary file) and reader (every field checked
// before anything is allocated, then each tensor read straight into its Array).
#include "train/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>
#include <vector>

#include "files/errno_text.h"
#include "files/fd.h"
#include "files/memory_limit.h"
#include "files/publish.h"
#include "ir/error.h"
#include "ir/hash.h"

namespace keel::train {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;  // what other readers accept
constexpr const char* kSupported = "F32, BF16, I32, I64, BOOL";

std::string st_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::boolean:
      return "BOOL";
  }
  return "?";
}

std::optional<DType> st_dtype(const std::string& s) {
  for (DType t : {DType::f32, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
    if (st_name(t) == s) return t;
  }
  return std::nullopt;
}

// dtypes of the safetensors format that keel has no DType for.
bool foreign_dtype(const std::string& s) {
  static const char* const kNames[] = {"F64",     "F16", "I8",      "U8",      "I16",
                                       "U16",     "U32", "U64",     "F8_E4M3", "F8_E5M2",
                                       "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};
  return std::find(std::begin(kNames), std::end(kNames), s) != std::end(kNames);
}

std::string header_bytes(const std::map<std::string, TensorType>& types,
                         const std::map<std::string, std::string>& metadata,
                         const std::string& checksum, const std::string& path) {
  json meta(metadata);
  meta["format"] = "pt";
  meta[kChecksumKey] = checksum;
  json header = json::object();
  header["__metadata__"] = std::move(meta);
  uint64_t offset = 0;
  for (const auto& [name, t] : types) {  // std::map order == the header's key order
    if (name == "__metadata__") {
      throw Error(fmt::format("[safetensors] {}: a tensor cannot be named __metadata__", path));
    }
    const auto bytes = static_cast<uint64_t>(t.bytes());
    header[name] = {{"dtype", st_name(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// One tensor's line of tensors_checksum.
std::string checksum_line(const std::string& name, const Array& a) {
  const std::string_view bytes(reinterpret_cast<const char*>(a.data()),
                               static_cast<size_t>(a.nbytes()));
  return fmt::format("{}\t{}{}\t{}\n", name, st_name(a.dtype()), shape_str(a.shape()),
                     hash_bytes(bytes).hex());
}

std::map<std::string, TensorType> types_of(const TensorMap& tensors) {
  std::map<std::string, TensorType> out;
  for (const auto& [name, a] : tensors) out[name] = {a.dtype(), a.shape()};
  return out;
}

}  // namespace

std::string tensors_checksum(const TensorMap& tensors) {
  std::string text;
  for (const auto& [name, a] : tensors) text += checksum_line(name, a);
  return "xxh3-128:" + hash_bytes(text).hex();
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string text =
      header_bytes(types_of(tensors), metadata, tensors_checksum(tensors), path);
  const uint64_t n = text.size();  // little-endian, checked above
  // Streamed from the Arrays: a checkpoint is never copied into one string.
  std::vector<std::string_view> pieces = {{reinterpret_cast<const char*>(&n), 8}, text};
  for (const auto& [name, a] : tensors) {
    pieces.emplace_back(reinterpret_cast<const char*>(a.data()), static_cast<size_t>(a.nbytes()));
  }
  files::publish_file(path, pieces);
}

void write_safetensors_streamed(const std::string& path,
                                const std::map<std::string, TensorType>& types,
                                const std::function<Array(const std::string& name)>& tensor,
                                const std::map<std::string, std::string>& metadata,
                                const std::vector<std::string>& order) {
  // The checksum comes last but sits in the header: its length is fixed, so the header is
  // written with a placeholder of that length and overwritten once the data is out.
  const std::string placeholder = "xxh3-128:" + std::string(32, '0');
  const std::string text = header_bytes(types, metadata, placeholder, path);
  const uint64_t n = text.size();
  // Each tensor's place in the data block (name order, as the header says), whatever the order
  // it is asked for in.
  std::map<std::string, uint64_t> offset;
  uint64_t end = 8 + n;
  for (const auto& [name, t] : types) {
    offset[name] = end;
    end += static_cast<uint64_t>(t.bytes());
  }
  std::vector<std::string> asked = order;
  if (asked.empty()) {
    for (const auto& [name, t] : types) asked.push_back(name);
  }
  std::vector<std::string> sorted = asked;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.size() != offset.size() ||
      !std::equal(sorted.begin(), sorted.end(), offset.begin(),
                  [](const std::string& a, const auto& b) { return a == b.first; })) {
    throw Error(
        fmt::format("[safetensors] {}: internal: the order to write in does not name "
                    "each of the {} tensors once",
                    path, types.size()));
  }
  files::publish_file(path, [&](int fd, const std::string& temp) {
    auto put = [&](const void* data, size_t bytes, uint64_t at) {
      const char* p = static_cast<const char*>(data);
      while (bytes > 0) {
        const ssize_t k = ::pwrite(fd, p, bytes, static_cast<off_t>(at));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
          throw Error(fmt::format("[safetensors] cannot write {}: {}", temp, files::errno_text()));
        }
        p += k;
        at += static_cast<uint64_t>(k);
        bytes -= static_cast<size_t>(k);
      }
    };
    put(&n, 8, 0);
    put(text.data(), text.size(), 8);
    std::map<std::string, std::string> lines;
    for (const std::string& name : asked) {
      const TensorType& t = types.at(name);
      const Array a = tensor(name);
      if (a.dtype() != t.dtype || a.shape() != t.shape) {
        throw Error(fmt::format("[safetensors] {}: internal: tensor {} came as {}{}, not {}", path,
                                name, dtype_name(a.dtype()), shape_str(a.shape()), t.str()));
      }
      put(a.data(), static_cast<size_t>(a.nbytes()), offset.at(name));
      lines[name] = checksum_line(name, a);
    }
    std::string all;
    for (const auto& [name, line] : lines) all += line;
    const std::string header =
        header_bytes(types, metadata, "xxh3-128:" + hash_bytes(all).hex(), path);
    if (header.size() != text.size()) {
      throw Error(fmt::format("[safetensors] {}: internal: the header changed length", temp));
    }
    put(header.data(), header.size(), 8);
  });
}

namespace {

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw InputError(fmt::format("[safetensors] {}: {}", path, what));
}

// A JSON non-negative integer, or nullopt.
std::optional<uint64_t> count_of(const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  return std::nullopt;
}

Entry parse_entry(const std::string& path, const std::string& name, const json& j) {
  auto field = [&](const char* key) -> const json& {
    if (!j.is_object() || !j.contains(key)) {
      bad(path, fmt::format("tensor \"{}\" has no \"{}\" (expected dtype, shape, data_offsets)",
                            name, key));
    }
    return j.at(key);
  };
  Entry e;
  e.name = name;
  const json& dt = field("dtype");
  if (!dt.is_string()) bad(path, fmt::format("tensor \"{}\": dtype is not a string", name));
  const std::string dts = dt.get<std::string>();
  if (auto t = st_dtype(dts)) {
    e.dtype = *t;
  } else if (foreign_dtype(dts)) {
    bad(path, fmt::format("tensor \"{}\": dtype {} is valid safetensors but keel does not "
                          "support it (supported: {})",
                          name, dts, kSupported));
  } else {
    bad(path, fmt::format("tensor \"{}\": unknown dtype \"{}\" (expected one of {})", name, dts,
                          kSupported));
  }
  const json& shape = field("shape");
  if (!shape.is_array()) bad(path, fmt::format("tensor \"{}\": shape is not an array", name));
  // Overflow-safe: the byte count is compared with offsets that lie inside the file.
  unsigned __int128 bytes = dtype_size(e.dtype);
  for (const json& d : shape) {
    auto v = count_of(d);
    if (!v || *v > static_cast<uint64_t>(INT64_MAX)) {
      bad(path, fmt::format("tensor \"{}\": shape {} is not a list of non-negative integers", name,
                            shape.dump()));
    }
    e.shape.push_back(static_cast<int64_t>(*v));
    bytes = std::min<unsigned __int128>(bytes * *v, UINT64_MAX);
  }
  const json& off = field("data_offsets");
  const bool pair = off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                    off[1].is_number_unsigned();
  if (pair) {
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
  }
  if (!pair || e.begin > e.end) {
    bad(path, fmt::format("tensor \"{}\": data_offsets {} is not [begin, end] with begin <= end",
                          name, off.dump()));
  }
  if (e.end - e.begin != bytes) {
    bad(path, fmt::format("tensor \"{}\": data_offsets [{},{}] hold {} bytes but shape {} of {} "
                          "needs {}",
                          name, e.begin, e.end, e.end - e.begin, shape_str(e.shape), dts,
                          static_cast<uint64_t>(bytes)));
  }
  return e;
}

// Tensors must tile [0, data_size) exactly.
void check_coverage(const std::string& path, std::vector<Entry>& entries, uint64_t data_start,
                    uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin > at) {
      bad(path, fmt::format("gap in the data block: bytes [{},{}) (file byte {}) belong to no "
                            "tensor, before \"{}\"",
                            at, e.begin, data_start + at, e.name));
    }
    if (e.begin < at) {
      bad(path, fmt::format("tensors \"{}\" [{},{}] and \"{}\" [{},{}] overlap", prev->name,
                            prev->begin, prev->end, e.name, e.begin, e.end));
    }
    at = e.end;
    prev = &e;
  }
  if (at > data_size) {
    bad(path, fmt::format("tensor \"{}\" ends at data byte {} but the data block is {} bytes "
                          "(file truncated?)",
                          prev->name, at, data_size));
  }
  if (at < data_size) {
    bad(path, fmt::format("{} trailing bytes after the last tensor: the header covers {} bytes, "
                          "the data block is {} (file byte {} onward)",
                          data_size - at, at, data_size, data_start + at));
  }
}

void read_exact(int fd, void* out, size_t size, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(out);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error(fmt::format("[safetensors] cannot read {}: {}", path, files::errno_text()));
    if (n == 0) bad(path, fmt::format("file shrank while reading (at byte {})", offset));
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path, bool whole) : path_(path) {
  // O_NONBLOCK: a FIFO is refused below instead of blocking the open.
  auto fd = std::make_shared<files::Fd>(
      ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd->get() < 0) {
    if (errno == ENOENT) bad(path, "no such file");
    throw Error(fmt::format("[safetensors] cannot open {}: {}", path, files::errno_text()));
  }
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) {
    throw Error(fmt::format("[safetensors] cannot stat {}: {}", path, files::errno_text()));
  }
  if (!S_ISREG(st.st_mode)) bad(path, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (const files::MemoryLimit memory = files::memory_limit();
      whole && memory.bytes > 0 && size > static_cast<uint64_t>(memory.bytes)) {
    bad(path, fmt::format("file is {} bytes, more than the {} bytes of memory this process may "
                          "use ({})",
                          size, memory.bytes, memory.source));
  }
  if (size < 8)
    bad(path, fmt::format("file is {} bytes, shorter than the 8-byte header length", size));
  uint64_t n = 0;
  read_exact(fd->get(), &n, 8, 0, path);
  if (n > kMaxHeaderBytes) {
    bad(path, fmt::format("header length {} (bytes 0-7) is above the 100 MB limit", n));
  }
  if (n > size - 8) {
    bad(path, fmt::format("header length {} (bytes 0-7) goes beyond the end of the file ({} bytes)",
                          n, size));
  }
  std::string text(n, '\0');
  read_exact(fd->get(), text.data(), n, 8, path);
  if (n == 0 || text[0] != '{') bad(path, "header at byte 8 is not a JSON object (no '{')");
  json header;
  try {
    header = json::parse(text);
  } catch (const json::parse_error& e) {
    bad(path, fmt::format("header is not JSON (parse error at file byte {})",
                          8 + (e.byte > 0 ? e.byte - 1 : 0)));
  } catch (const json::out_of_range&) {  // a number beyond double, "1e400"
    bad(path, "header holds a number out of range");
  }
  if (!header.is_object()) bad(path, "header is not a JSON object");

  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key != "__metadata__") {
      entries.push_back(parse_entry(path, key, value));
      continue;
    }
    if (!value.is_object()) bad(path, "__metadata__ is not an object of strings");
    for (const auto& [mk, mv] : value.items()) {
      if (!mv.is_string()) {
        bad(path, fmt::format("__metadata__ \"{}\" is {}, expected a string", mk, mv.type_name()));
      }
      metadata_[mk] = mv.get<std::string>();
    }
  }
  data_start_ = 8 + n;
  check_coverage(path, entries, data_start_, size - data_start_);
  for (const Entry& e : entries) {
    types_[e.name] = {e.dtype, e.shape};
    stored_[e.name].begin = e.begin;
  }
  fd_ = std::move(fd);
}

Array SafetensorsReader::read(const std::string& name) {
  const auto it = stored_.find(name);
  if (it == stored_.end()) {
    throw Error(
        fmt::format("[safetensors] {}: internal: no tensor \"{}\" was asked for", path_, name));
  }
  const TensorType& t = types_.at(name);
  Array a = Array::uninitialized(t.dtype, t.shape);  // every byte read below
  read_exact(fd_->get(), a.data(), a.nbytes(), data_start_ + it->second.begin, path_);
  it->second.checksum_line = checksum_line(name, a);
  return a;
}

void SafetensorsReader::check_checksum_reading_the_rest() {
  for (const auto& [name, stored] : stored_) {
    if (stored.checksum_line.empty()) read(name);
  }
  check_checksum();
}

void SafetensorsReader::check_checksum() const {
  const auto it = metadata_.find(kChecksumKey);
  if (it == metadata_.end()) return;
  std::string lines;
  for (const auto& [name, e] : stored_) {
    if (e.checksum_line.empty()) {
      throw Error(
          fmt::format("[safetensors] {}: internal: tensor \"{}\" was never read, so the "
                      "checksum cannot be checked",
                      path_, name));
    }
    lines += e.checksum_line;
  }
  const std::string got = "xxh3-128:" + hash_bytes(lines).hex();
  if (got != it->second) {
    bad(path_, fmt::format("its tensors do not match the checksum in its header ({} {}, the "
                           "tensors {}): damaged, or rewritten by a tool that kept the header's "
                           "metadata; use another copy",
                           kChecksumKey, it->second, got));
  }
}

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsReader reader(path, true);
  SafetensorsFile out;
  out.metadata = reader.metadata();
  for (const auto& [name, t] : reader.types()) out.tensors.emplace(name, reader.read(name));
  reader.check_checksum();
  return out;
}

}  // namespace keel::train
