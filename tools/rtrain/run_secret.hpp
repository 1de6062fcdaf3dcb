// File: rtrain/run_secret.hpp
//
// A run's shared secret: what every peer of rtrain's stores (the agents' rendezvous of
// rtrain launch, the workers' store of rtrain run) proves it holds before it is served.
// rtrain launch makes one per run on one node (32 random bytes) and hands it to its
// workers as RKIT_RUN_SECRET; on several nodes every agent reads the same one (from
// --secret-file, RKIT_RUN_SECRET_FILE or RKIT_RUN_SECRET), since no agent alone can make it.
//
//   RunSecret s = RunSecret::generate();
//   setenv("RKIT_RUN_SECRET", s.text().c_str(), 1);            // what the workers read
//   std::optional<RunSecret> t = RunSecret::from_env();        // in a worker: the same key
//   TcpStore store(addr, port, true, 60s, t->key("workers"));  // a store only t's holders reach
//
// The secret is text (printable, no newline): its keys are BLAKE2b-256 of it
// (crypto_generichash, keyed by a label per purpose), so any text of 16 or more bytes
// serves; `openssl rand -hex 32` or `head -c 32 /dev/urandom | base64` make good ones.
#pragma once

#include <array>
#include <optional>
#include <string>

namespace rkit::rtrain {

// A 32-byte key, as libsodium's crypto_auth takes it.
using Key = std::array<unsigned char, 32>;

// The key of the same-user mode: no secret, a fixed public key (see tcp_store.hpp).
inline constexpr Key kNoSecret{};

class RunSecret {
 public:
  static constexpr std::size_t kMinBytes = 16, kMaxBytes = 4096;

  // 32 random bytes (randombytes_buf), as 64 hex digits.
  static RunSecret generate();
  // `text` itself: Error(Usage) naming `source` when it is shorter than 16 bytes, longer
  // than 4096, or holds a control character (a NUL or a newline cannot pass in the environment).
  static RunSecret from_text(std::string text, const std::string& source);
  // The file's first line (a final newline is dropped). Refused unless it is a regular
  // file owned by this user and neither group nor others may read or write it
  // (Error(NoPerm): "chmod 600 F"); a missing file is Error(NoInput). Opened with
  // O_NOFOLLOW: a symbolic link is refused too.
  static RunSecret from_file(const std::string& path);
  // RKIT_RUN_SECRET when set (not empty), else the file RKIT_RUN_SECRET_FILE names, else none.
  static std::optional<RunSecret> from_env();

  // What to hand on to workers as RKIT_RUN_SECRET.
  const std::string& text() const { return text_; }
  // The key for one purpose ("agents", "workers"): BLAKE2b-256 of the text keyed by
  // "rkit.rtrain.<purpose>.v1", so that the stores of two purposes never accept each
  // other's peers.
  Key key(const std::string& purpose) const;

 private:
  explicit RunSecret(std::string text) : text_(std::move(text)) {}
  std::string text_;
};

// libsodium's sodium_init, once; Error(Software) when it fails (no entropy source).
void sodium_ready();

}  // namespace rkit::rtrain
