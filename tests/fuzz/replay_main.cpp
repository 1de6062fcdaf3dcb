// Runs a fuzz target over every file of the corpus folders it is given, without
// libFuzzer: the regression half of fuzzing, run by ctest in `make test`. Fails when
// a folder is empty, so that a lost corpus does not pass as a clean run.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  std::size_t total = 0;
  for (int i = 1; i < argc; ++i) {
    std::size_t here = 0;
    for (const auto& entry : std::filesystem::directory_iterator(argv[i])) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      ++here;
    }
    if (here == 0) {
      std::fprintf(stderr, "replay: %s: no corpus files\n", argv[i]);
      return 1;
    }
    total += here;
  }
  std::printf("replayed %zu inputs\n", total);
  return 0;
}
