# Thin wrapper around CMake (out-of-tree build in build/).
BUILD ?= build
ASAN_BUILD ?= build-asan
CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: all deps demo test test-mutants test-c test-e2e test-asan install clean

all:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j2

deps:
	bash scripts/deps.sh

# The main job: the latency comparison table (and its plot).
demo: deps
	$(MAKE) all
	bash scripts/demo.sh $(BUILD)

# Every test: C unit tests, end-to-end tests, and the C tests again under
# ASan+UBSan; every exit status counts, with floors (test/floor.txt) and
# allowed skips (test/skips.allow). Ends with one "N passed, N failed" line.
test: deps
	$(MAKE) all CMAKE_FLAGS="-DLF_WERROR=ON $(CMAKE_FLAGS)"
	bash scripts/test.sh $(BUILD) $(ASAN_BUILD)

# The mutants alone (make test runs them too): the library built with each
# deliberate fault of test/mutants/mutants.py, in a copy of the tree, against
# the tests that must catch it; a table of what killed each. Fails when one
# survives that is not marked as an expected survivor.
test-mutants: deps
	bash scripts/test.sh $(BUILD) --only mutants

install: all
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
