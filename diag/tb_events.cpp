// TensorBoard's record format and the few Event protobuf fields scalars need, encoded by hand
// (no protobuf dependency); the reader checks both CRCs and every length.
#include "diag/tb_events.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "files/host.h"
#include "files/read.h"
#include "ir/error.h"

namespace keel::diag {

namespace {

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // Castagnoli
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();
constexpr int64_t kMaxEventFileBytes = int64_t{1} << 30;  // ~30 M scalars

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <class T>
void put_fixed(std::string& out, T v) {  // little-endian, as protobuf and the record header
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_varint(out, (field << 3) | 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event.wall_time (1, double) and the optional Event.step (2, int64).
std::string event_head(double wall_time) {
  std::string e;
  put_varint(e, (1 << 3) | 1);
  put_fixed(e, wall_time);
  return e;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// The host as TensorBoard writers spell it, restricted to characters safe in a file name.
std::string host_name() {
  std::string s = files::host_name();
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  }
  return s;
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (char ch : bytes) c = kCrcTable[(c ^ static_cast<uint8_t>(ch)) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("[tensorboard] cannot create {}: {}", dir, ec.message()));
  static std::atomic<uint64_t> counter{0};  // two writers in one second get two files
  path_ = (std::filesystem::path(dir) / fmt::format("events.out.tfevents.{:010d}.{}.{}.{}",
                                                    static_cast<int64_t>(std::time(nullptr)),
                                                    host_name(), ::getpid(), counter++))
              .string();
  file_ =
      files::AppendFile(path_, "TensorBoard events", {.exclusive = true, .single_writer = true});
  std::string e = event_head(now_seconds());
  put_bytes(e, 3, "brain.Event:2");  // file_version: TensorBoard reads the file as Event:2
  write_record(e);
  flush();
}

EventWriter::~EventWriter() {
  if (!file_.is_open() || pending_.empty()) return;
  try {
    flush();
  } catch (const Error&) {  // best effort: a destructor cannot report
  }
}

void EventWriter::add_scalar(const std::string& tag, int64_t step, float value, double wall_time) {
  std::string v;
  put_bytes(v, 1, tag);
  put_varint(v, (2 << 3) | 5);
  put_fixed(v, value);
  std::string summary;
  put_bytes(summary, 1, v);  // Summary.value
  std::string e = event_head(wall_time);
  put_varint(e, 2 << 3);
  put_varint(e, static_cast<uint64_t>(step));  // int64: negative is ten bytes, as protobuf
  put_bytes(e, 5, summary);
  write_record(e);
}

void EventWriter::write_record(const std::string& payload) {
  std::string rec;
  put_fixed<uint64_t>(rec, payload.size());
  put_fixed(rec, masked_crc32c(rec));
  rec += payload;
  put_fixed(rec, masked_crc32c(payload));
  pending_ += rec;
}

void EventWriter::flush() {
  if (!pending_.empty()) file_.append(pending_);
  pending_.clear();
  file_.sync();
}

namespace {

struct Malformed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Field {
  uint64_t number = 0;
  int wire = 0;
  uint64_t varint = 0;
  std::string_view bytes;  // fixed64, fixed32 and length-delimited payloads
};

uint64_t get_varint(std::string_view msg, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= msg.size()) throw Malformed("varint runs past the end");
    const auto b = static_cast<uint8_t>(msg[pos++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  throw Malformed("varint longer than 10 bytes");
}

std::string_view take(std::string_view msg, size_t& pos, uint64_t n) {
  if (n > msg.size() - pos) throw Malformed("field runs past the end of its message");
  std::string_view s = msg.substr(pos, n);
  pos += n;
  return s;
}

// Calls fn for every field of a message; unknown fields are skipped by their wire type.
template <class F>
void each_field(std::string_view msg, F fn) {
  size_t pos = 0;
  while (pos < msg.size()) {
    const uint64_t key = get_varint(msg, pos);
    Field f;
    f.number = key >> 3;
    f.wire = static_cast<int>(key & 7);
    if (f.number == 0) throw Malformed("field number 0");
    if (f.wire == 0) {
      f.varint = get_varint(msg, pos);
    } else if (f.wire == 1) {
      f.bytes = take(msg, pos, 8);
    } else if (f.wire == 2) {
      f.bytes = take(msg, pos, get_varint(msg, pos));
    } else if (f.wire == 5) {
      f.bytes = take(msg, pos, 4);
    } else {
      throw Malformed(fmt::format("field {} has unsupported wire type {}", f.number, f.wire));
    }
    fn(f);
  }
}

void expect_wire(const Field& f, int wire, const char* what) {
  if (f.wire != wire) {
    throw Malformed(
        fmt::format("{} (field {}) has wire type {}, expected {}", what, f.number, f.wire, wire));
  }
}

template <class T>
T get_fixed(std::string_view b) {
  T v;
  std::memcpy(&v, b.data(), sizeof(T));
  return v;
}

// One Event: its scalar values (none for the version record and non-scalar summaries).
std::vector<ScalarEvent> parse_event(std::string_view payload) {
  std::vector<ScalarEvent> out;
  double wall_time = 0;
  int64_t step = 0;
  each_field(payload, [&](const Field& f) {
    if (f.number == 1) {
      expect_wire(f, 1, "Event.wall_time");
      wall_time = get_fixed<double>(f.bytes);
    } else if (f.number == 2) {
      expect_wire(f, 0, "Event.step");
      step = static_cast<int64_t>(f.varint);
    } else if (f.number == 5) {
      expect_wire(f, 2, "Event.summary");
      each_field(f.bytes, [&](const Field& sv) {
        if (sv.number != 1) return;
        expect_wire(sv, 2, "Summary.value");
        ScalarEvent ev;
        bool scalar = false;
        each_field(sv.bytes, [&](const Field& vf) {
          if (vf.number == 1) {
            expect_wire(vf, 2, "Value.tag");
            ev.tag = std::string(vf.bytes);
          } else if (vf.number == 2) {
            expect_wire(vf, 5, "Value.simple_value");
            ev.value = get_fixed<float>(vf.bytes);
            scalar = true;
          }
        });
        if (scalar) out.push_back(std::move(ev));
      });
    }
  });
  for (ScalarEvent& ev : out) {  // step and wall_time may follow the summary on the wire
    ev.step = step;
    ev.wall_time = wall_time;
  }
  return out;
}

}  // namespace

std::vector<ScalarEvent> read_scalar_events(const std::string& path) {
  const std::string data = files::read_file(path, kMaxEventFileBytes, "a TensorBoard event file");
  auto bad = [&](size_t at, const std::string& what) {
    return InputError(fmt::format("[tensorboard] {}: record at byte {}: {}", path, at, what));
  };
  std::vector<ScalarEvent> out;
  size_t at = 0;
  while (at < data.size()) {
    const size_t left = data.size() - at;
    if (left < 12) throw bad(at, fmt::format("truncated: {} bytes left, a header needs 12", left));
    const std::string_view len_bytes(data.data() + at, 8);
    if (masked_crc32c(len_bytes) != get_fixed<uint32_t>({data.data() + at + 8, 4})) {
      throw bad(at, fmt::format("length CRC mismatch (bytes {}-{})", at, at + 11));
    }
    const uint64_t len = get_fixed<uint64_t>(len_bytes);
    if (left < 16 || len > left - 16) {
      throw bad(at, fmt::format("truncated: length {} needs {} more bytes, {} left", len, len + 4,
                                left - 12));
    }
    const std::string_view payload(data.data() + at + 12, len);
    if (masked_crc32c(payload) != get_fixed<uint32_t>({data.data() + at + 12 + len, 4})) {
      throw bad(at, fmt::format("payload CRC mismatch (bytes {}-{})", at + 12, at + 15 + len));
    }
    try {
      for (ScalarEvent& ev : parse_event(payload)) out.push_back(std::move(ev));
    } catch (const Malformed& e) {
      throw bad(at, fmt::format("malformed Event: {}", e.what()));
    }
    at += 16 + len;
  }
  return out;
}

}  // namespace keel::diag
