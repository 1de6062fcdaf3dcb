# rkit: thin wrapper over CMake and the test runners. See README.md.
#   make            Release build in build/
#   make test       install what is missing, build, run every test (unit, CLI, completions)
#   make demo       install what is missing, build, run the main job end to end
#   make bench      benchmarks against the anchors: JSON in bench/results/ plus a ratio table
#   make install    install to PREFIX (default /usr/local)
#   make package    .deb and .tar.gz in dist/
#   make gpu-check  build with CUDA and run the checks that need a real GPU
#   make fuzz       fuzz the parsers with libFuzzer for FUZZ_SECONDS each (clang)
#   make deps       install the Debian packages the above need (root)
#   make format     lay out every C++ and CUDA file as .clang-format says (make test checks it)

PREFIX ?= /usr/local
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
MAKEFLAGS += --no-print-directory

SHELL := /bin/bash

.PHONY: all build deps test demo bench install package gpu-check fuzz completions format clean

all: build

# Each target installs only the package groups it needs (make deps: all of them).
deps:
	@packaging/install-deps.sh $(DEPS_GROUPS)

test: DEPS_GROUPS = build tests
demo: DEPS_GROUPS = build demo
bench: DEPS_GROUPS = build bench
package: DEPS_GROUPS = build package
gpu-check: DEPS_GROUPS = build tests

$(BUILD)/CMakeCache.txt:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

# The build's progress lines are filtered out; its status is the build's own.
build: $(BUILD)/CMakeCache.txt
	@set -o pipefail; cmake --build $(BUILD) -j $(JOBS) 2>&1 | { grep -v -E '^\[ *[0-9]+%\]|^-- ' || true; }

# deps runs first, then the build (also under make -j). The tests are configured in
# whatever build directory there is (a demo's leaves them out).
test: deps
	@if [[ -f $(BUILD)/CMakeCache.txt ]]; then cmake -S . -B $(BUILD) -DRKIT_TESTS=ON >/dev/null; \
	else cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DRKIT_TESTS=ON $(CMAKE_FLAGS) >/dev/null; fi
	@$(MAKE) build
	@tests/run.sh $(BUILD)

# The demo needs the tools, not the test stack: a new build directory leaves the tests
# out (make test adds them later).
demo: deps
	@[[ -f $(BUILD)/CMakeCache.txt ]] || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DRKIT_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@$(MAKE) build
	@examples/demo.sh $(BUILD)

bench: deps
	@$(MAKE) build
	@bench/run.sh $(BUILD) $(BENCH)

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# Packages come from their own build tree, without the tests.
package: deps
	@cmake -S . -B $(BUILD)-package -DCMAKE_BUILD_TYPE=Release -DRKIT_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)-package -j $(JOBS) >/dev/null
	@cd $(BUILD)-package && cpack -B $(CURDIR)/dist >/dev/null && rm -rf $(CURDIR)/dist/_CPack_Packages
	@ls $(CURDIR)/dist/*.deb $(CURDIR)/dist/*.tar.gz

# Parsers under libFuzzer with AddressSanitizer and UBSan, in their own build tree.
fuzz:
	@packaging/install-deps.sh fuzz
	@CXX=clang++ CC=clang cmake -S . -B $(BUILD)-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRKIT_FUZZ=ON \
	  -DRKIT_TESTS=OFF -DRKIT_CUDA=OFF \
	  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS) >/dev/null
	@tests/fuzz/run.sh $(BUILD)-fuzz $(FUZZ_SECONDS)

gpu-check: deps
	@tests/gpu/gpu-check.sh

completions: build
	@for t in $(BUILD)/tools/*/; do n=$$(basename $$t); \
	  $$t/$$n --print-completion bash > completions/bash/$$n; \
	  $$t/$$n --print-completion zsh > completions/zsh/_$$n; \
	  $$t/$$n --print-completion fish > completions/fish/$$n.fish; done

format:
	@git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' | xargs clang-format -i

clean:
	@rm -rf $(BUILD) dist
