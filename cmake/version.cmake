# Writes rkit/version.hpp with the current git revision. Run at every build (see
# libcommon/CMakeLists.txt) so that --version never shows a stale revision;
# configure_file leaves the file untouched when nothing changed, so nothing rebuilds.
execute_process(COMMAND git rev-parse --short=12 HEAD
                WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE RKIT_GIT_REVISION OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET)
if(NOT RKIT_GIT_REVISION)
  set(RKIT_GIT_REVISION unknown)
endif()
configure_file(${INPUT} ${OUTPUT} @ONLY)
