// File: rtrain/run_secret.cpp — a run's shared secret (run_secret.hpp).
#include "run_secret.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rtrain {

void sodium_ready() {
  static const int rc = ::sodium_init();  // 0 first time, 1 when already done; -1: failed
  if (rc < 0) throw Error(Exit::Software, "libsodium: sodium_init failed", "is /dev/urandom readable?");
}

RunSecret RunSecret::generate() {
  sodium_ready();
  unsigned char raw[32];
  ::randombytes_buf(raw, sizeof raw);
  char hex[2 * sizeof raw + 1];
  ::sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
  ::sodium_memzero(raw, sizeof raw);
  RunSecret s{std::string(hex)};
  ::sodium_memzero(hex, sizeof hex);
  return s;
}

RunSecret RunSecret::from_text(std::string text, const std::string& source) {
  if (text.size() < kMinBytes || text.size() > kMaxBytes)
    throw Error(
        Exit::Usage,
        fmt::format("{}: a run secret must be {} to {} bytes, not {}", source, kMinBytes, kMaxBytes, text.size()),
        "make one with: openssl rand -hex 32");
  for (const char c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      throw Error(Exit::Usage, fmt::format("{}: a run secret is one line of text, without control characters", source),
                  "make one with: openssl rand -hex 32");
  return RunSecret(std::move(text));
}

RunSecret RunSecret::from_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    if (errno == ELOOP)
      throw Error(Exit::NoPerm, fmt::format("secret file {}: is a symbolic link", path), "name the file itself");
    throw system_error("secret file " + path, errno);
  }
  struct stat sb {};
  if (::fstat(fd.get(), &sb) != 0) throw system_error("secret file " + path, errno);
  if (!S_ISREG(sb.st_mode)) throw Error(Exit::NoPerm, fmt::format("secret file {}: not a regular file", path));
  if (sb.st_uid != ::geteuid())
    throw Error(Exit::NoPerm,
                fmt::format("secret file {}: owned by uid {}, not by this user ({})", path, sb.st_uid, ::geteuid()));
  if (sb.st_mode & (S_IRWXG | S_IRWXO))
    throw Error(Exit::NoPerm,
                fmt::format("secret file {}: group or others may access it (mode {:04o})", path, sb.st_mode & 07777),
                fmt::format("chmod 600 {}", path));
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error("read secret file " + path, errno);
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxBytes + 2) break;  // too long: refused below
  }
  ::sodium_memzero(buf, sizeof buf);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return from_text(std::move(text), "secret file " + path);
}

std::optional<RunSecret> RunSecret::from_env() {
  if (const char* v = std::getenv("RKIT_RUN_SECRET"); v && *v) return from_text(v, "RKIT_RUN_SECRET");
  if (const char* f = std::getenv("RKIT_RUN_SECRET_FILE"); f && *f) return from_file(f);
  return std::nullopt;
}

Key RunSecret::key(const std::string& purpose) const {
  sodium_ready();
  const std::string label = "rkit.rtrain." + purpose + ".v1";  // 16 to 64 bytes: a generichash key
  Key k{};
  ::crypto_generichash(k.data(), k.size(), reinterpret_cast<const unsigned char*>(text_.data()), text_.size(),
                       reinterpret_cast<const unsigned char*>(label.data()), label.size());
  return k;
}

}  // namespace rkit::rtrain
