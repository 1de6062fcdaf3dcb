#!/usr/bin/env bats
# The tree says what it is: a concept two tools use lives once, in libcommon, and no tool
# links another tool's library or includes a header from another tool's folder.
bats_require_minimum_version 1.5.0
load helpers

@test "no tool links another tool's library or includes another tool's headers" {
  run python3 - "$RKIT_ROOT" <<'PY'
import os, re, sys
root = sys.argv[1]
tools = sorted(d for d in os.listdir(f"{root}/tools") if os.path.isfile(f"{root}/tools/{d}/CMakeLists.txt"))
bad = []
for t in tools:
    folder = f"{root}/tools/{t}"
    # Link: another tool's library target (rsub_lib, rckpt_lib ...).
    for dirpath, _, files in os.walk(folder):
        for f in files:
            if f == "CMakeLists.txt":
                text = open(os.path.join(dirpath, f)).read()
                for other in tools:
                    if other != t and re.search(rf"\b{other}_lib\b", text):
                        bad.append(f"{os.path.relpath(dirpath, root)}/CMakeLists.txt links {other}_lib")
    # Include: a quoted header must be the tool's own, libcommon's (rkit/...), a kernel's,
    # or generated; one that only another tool's folder has is a reach into it.
    own = set()
    for dirpath, _, files in os.walk(folder):
        own.update(os.path.relpath(os.path.join(dirpath, f), folder) for f in files)
        own.update(files)
    for dirpath, _, files in os.walk(folder):
        for f in files:
            if not f.endswith((".cpp", ".hpp", ".cu", ".cuh", ".h")):
                continue
            path = os.path.join(dirpath, f)
            for line in open(path, errors="replace"):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                inc = m.group(1)
                if inc in own or inc.startswith("rkit/") or os.path.exists(os.path.join(dirpath, inc)):
                    continue
                if any(os.path.exists(os.path.join(d, inc)) for d, _, _ in os.walk(f"{root}/kernels")):
                    continue
                owners = [o for o in tools if o != t and any(
                    os.path.exists(os.path.join(d, inc)) for d, _, _ in os.walk(f"{root}/tools/{o}"))]
                bad.append(f"{os.path.relpath(path, root)} includes \"{inc}\"" +
                           (f", which is {', '.join(owners)}'s" if owners else ", which no folder of its own has"))
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
  [[ $status -eq 0 ]] || { echo "$output"; return 1; }
}

@test "every C++ and CUDA file is laid out as .clang-format says (make format rewrites them)" {
  command -v clang-format >/dev/null || fail "clang-format is missing (packaging/install-deps.sh tests installs it)"
  cd "$RKIT_ROOT"
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
  ((${#files[@]} > 100)) || fail "only ${#files[@]} C++ files found: not a checkout?"
  run clang-format --dry-run -Werror "${files[@]}"
  # The first few places, as clang-format names them (file:line:col: error: ...).
  [[ $status -eq 0 ]] || fail "$(grep -m 5 ': error:' <<<"$output")"
}
