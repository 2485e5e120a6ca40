#include "cache/signing.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sodium.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "files/fd.h"
#include "files/publish.h"
#include "files/read.h"
#include "ir/error.h"

namespace keel::cache {
namespace {

constexpr std::string_view kKeyHeader = "keel ed25519 secret key v1\n";
// Domain separation: a signature on an entry is never valid as a signature on anything else.
constexpr std::string_view kContext = "keel cache entry manifest v1\n";

void init_sodium() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (sodium_init() < 0) throw Error("[cache] libsodium failed to initialise");
  });
}

std::string to_hex(std::string_view bytes) {
  std::string out(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                 bytes.size());
  out.pop_back();
  return out;
}

// Exactly `size` bytes from lowercase or uppercase hex, or nullopt.
std::optional<std::string> from_hex(std::string_view hex, size_t size) {
  if (hex.size() != size * 2) return std::nullopt;
  std::string out(size, '\0');
  size_t n = 0;
  if (sodium_hex2bin(reinterpret_cast<unsigned char*>(out.data()), size, hex.data(), hex.size(),
                     nullptr, &n, nullptr) != 0 ||
      n != size) {
    return std::nullopt;
  }
  return out;
}

std::optional<std::string> public_key_bytes(std::string_view id) {
  if (id.substr(0, 8) != "ed25519:") return std::nullopt;
  return from_hex(id.substr(8), crypto_sign_PUBLICKEYBYTES);
}

std::string message(std::string_view manifest_text) {
  return std::string(kContext) + std::string(manifest_text);
}

}  // namespace

void check_public_key_id(const std::string& id, const std::string& source) {
  if (!public_key_bytes(id)) {
    throw InputError(fmt::format(
        "[cache] {}: '{}' is not a public key; expected ed25519:<64 hex digits> as printed by "
        "keel cache keygen",
        source, id));
  }
}

SigningKey SigningKey::read(const std::string& path) {
  init_sodium();
  const std::string text = files::read_file(path, 4096, "the cache signing key");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    throw InputError(fmt::format(
        "[cache] signing key {} is readable by group or others (mode {:o}); chmod 600 it", path,
        st.st_mode & 0777));
  }
  std::optional<std::string> secret;
  if (text.rfind(kKeyHeader, 0) == 0) {
    std::string hex = text.substr(kKeyHeader.size());
    while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r')) hex.pop_back();
    secret = from_hex(hex, crypto_sign_SECRETKEYBYTES);
  }
  if (!secret) {
    throw InputError(fmt::format(
        "[cache] signing key {}: not a keel secret key (expected the file keel cache keygen "
        "writes)",
        path));
  }
  SigningKey k;
  k.secret_ = std::move(*secret);
  // The public key is the secret's second half.
  k.public_id_ = "ed25519:" + to_hex(std::string_view(k.secret_).substr(crypto_sign_SEEDBYTES));
  return k;
}

std::string content_digest(std::string_view bytes) {
  init_sodium();
  unsigned char out[32];
  crypto_generichash(out, sizeof out, reinterpret_cast<const unsigned char*>(bytes.data()),
                     bytes.size(), nullptr, 0);
  return to_hex(std::string_view(reinterpret_cast<char*>(out), sizeof out));
}

SigningKey SigningKey::generate(const std::string& path) {
  init_sodium();
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  std::string sk(crypto_sign_SECRETKEYBYTES, '\0');
  crypto_sign_keypair(pk, reinterpret_cast<unsigned char*>(sk.data()));
  files::PublishOptions o;
  o.mode = 0600;
  struct stat st {};
  if (path.empty() || path.back() == '/') {
    throw InputError(fmt::format(
        "[cache] keel cache keygen --out '{}' names no file; give the path of the key to write",
        path));
  }
  if (::lstat(path.c_str(), &st) == 0) {
    throw InputError(fmt::format("[cache] {} exists{}; keygen never overwrites a key", path,
                                 S_ISDIR(st.st_mode) ? " (a directory)" : ""));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty() && ::stat(dir.c_str(), &st) != 0) {
    throw InputError(fmt::format(
        "[cache] cannot write the key {}: its directory {} does not exist; create it first", path,
        dir));
  }
  files::publish_file(path, std::string(kKeyHeader) + to_hex(sk) + "\n", o);
  SigningKey k;
  k.secret_ = std::move(sk);
  k.public_id_ = "ed25519:" + to_hex(std::string_view(reinterpret_cast<char*>(pk), sizeof pk));
  return k;
}

std::string SigningKey::sign(std::string_view manifest_text) const {
  init_sodium();
  const std::string m = message(manifest_text);
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(m.data()), m.size(),
                       reinterpret_cast<const unsigned char*>(secret_.data()));
  return nlohmann::json{
             {"key", public_id_},
             {"signature", to_hex(std::string_view(reinterpret_cast<char*>(sig), sizeof sig))}}
             .dump() +
         "\n";
}

std::optional<std::string> signature_problem(const std::optional<std::string>& signature_text,
                                             std::string_view manifest_text,
                                             const std::vector<PublicKeyId>& trusted) {
  init_sodium();
  if (!signature_text) return "it is not signed";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*signature_text);
  } catch (const std::exception&) {
    return "its signature file is not JSON";
  }
  if (!j.is_object() || !j.contains("key") || !j["key"].is_string() || !j.contains("signature") ||
      !j["signature"].is_string()) {
    return "its signature file lacks \"key\" or \"signature\"";
  }
  const std::string id = j["key"].get<std::string>();
  const std::optional<std::string> pk = public_key_bytes(id);
  const std::optional<std::string> sig =
      from_hex(j["signature"].get<std::string>(), crypto_sign_BYTES);
  if (!pk || !sig) return "its signature file holds a malformed key or signature";
  if (std::find(trusted.begin(), trusted.end(), id) == trusted.end()) {
    return fmt::format("it is signed by {}, which is not in compile_cache.trusted_keys", id);
  }
  const std::string m = message(manifest_text);
  if (crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(sig->data()),
                                  reinterpret_cast<const unsigned char*>(m.data()), m.size(),
                                  reinterpret_cast<const unsigned char*>(pk->data())) != 0) {
    return fmt::format("its signature by {} does not match its manifest (altered or swapped)", id);
  }
  return std::nullopt;
}

}  // namespace keel::cache
