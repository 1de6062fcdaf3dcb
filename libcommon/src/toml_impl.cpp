// toml++'s implementation, compiled once into rkit_common rather than loaded from
// libtomlplusplus.so (see CMakeLists.txt); every other file includes only its declarations.
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
