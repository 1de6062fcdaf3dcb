// Fuzz target: whole .rkpt archives as rckpt reads them (rkit/ckpt/archive.hpp):
// the index at the end, the manifest it locates, and every frame it names.
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "fuzz.hpp"
#include "rkit/ckpt/archive.hpp"
#include "rkit/ckpt/frame_codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rkit::rckpt;
  int fd = ::memfd_create("fuzz.rkpt", 0);
  if (fd < 0) return 0;
  bool written = ::write(fd, data, size) == static_cast<ssize_t>(size);
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (written) {
    rkit::fuzz::expect_clean([&] {
      Archive a = Archive::open(path);
      FrameDecoder decoder;
      std::vector<std::byte> packed, raw;
      for (std::size_t i = 0; i < a.manifest().frames.size(); ++i) {
        const FrameRecord& fr = a.manifest().frames[i];
        if (fr.base) continue;
        try {
          a.read_frame(i, packed);
          raw.resize(fr.raw_bytes);
          decoder.decode(packed, fr.raw_bytes, fr.shuffle, raw.data());
        } catch (const FrameError&) {
        }
      }
    });
  }
  ::close(fd);
  return 0;
}
