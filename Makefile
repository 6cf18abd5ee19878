# Thin wrapper around CMake (out-of-tree build in build/).
BUILD ?= build
ASAN_BUILD ?= build-asan
CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: all deps demo check test test-extra test-all test-mutants install deb clean

all:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j2

deps:
	bash scripts/deps.sh

# The main job: the latency comparison table (and its plot).
demo: deps
	$(MAKE) all
	bash scripts/demo.sh $(BUILD)

# The C unit tests (test/test-*.c, one program per area): no root needed
# (each passes as an unprivileged user), under a minute (about 30 s on
# 2 vCPUs, test-signals most of it), one "N passed, N failed, N skipped"
# line. Needs none of make test's dependencies beyond the build's. First,
# that the libraries call none of their own exported names through the
# dynamic linker (scripts/check-plt.sh).
C_TESTS := $(notdir $(basename $(wildcard test/test-*.c)))
check:
	$(MAKE) all CMAKE_FLAGS="-DLF_WERROR=ON $(CMAKE_FLAGS)"
	sh scripts/check-plt.sh $(BUILD)/libloopfast.so $(BUILD)/libloopfast-preload.so
	bash scripts/test.sh $(BUILD) $(addprefix --only c:,$(C_TESTS))

# The tests (test/README.md): every exit status counts, with floors
# (test/floor.txt) and allowed skips (test/skips.allow); each run ends with
# a table of each suite's counts and wall time and one "N passed, N failed,
# N skipped" line.
#
#   make check       the C unit tests alone (above).
#   make test        the C unit tests, the end-to-end tests not marked
#                    extra and the compat suite: at most 10 minutes on 2
#                    vCPUs with the build, on a slow day too (test/README.md).
#   make test-extra  what make test leaves out: the fuzz targets (30 s
#                    each), the C tests under ASan+UBSan, the comparison
#                    matrix with busy polling, the e2e tests marked extra
#                    (whole bench runs, Go and old-version builds, the
#                    bench tools, the supervisor, IPv6 runs), every compat
#                    program sent every signal, and the mutants. .ci/run
#                    runs it after make test.
#   make test-all    both in one run, one summary.
#   make test-mutants  the mutants alone.
test: deps
	$(MAKE) all CMAKE_FLAGS="-DLF_WERROR=ON $(CMAKE_FLAGS)"
	bash scripts/test.sh $(BUILD) $(ASAN_BUILD)

test-extra: deps
	$(MAKE) all CMAKE_FLAGS="-DLF_WERROR=ON $(CMAKE_FLAGS)"
	bash scripts/test.sh $(BUILD) $(ASAN_BUILD) --extra

test-all: deps
	$(MAKE) all CMAKE_FLAGS="-DLF_WERROR=ON $(CMAKE_FLAGS)"
	bash scripts/test.sh $(BUILD) $(ASAN_BUILD) --all

# The mutants alone: the library built with each deliberate fault of
# test/mutants/mutants.py, in a copy of the tree, against the tests that
# must catch it; a table of what killed each (those killed only by a
# timeout listed apart). Fails when one survives that is not marked as an
# expected survivor.
test-mutants: deps
	bash scripts/test.sh $(BUILD) --only mutants

install: all
	cmake --install $(BUILD)

# The Debian packages (debian/, debian/README.md): loopfast, libloopfast0,
# libloopfast-dev, libloopfast-rio0, libloopfast-rio-dev, python3-loopfast,
# built by dpkg-buildpackage from a copy of the tree into build/deb/, then
# lintian's verdict. Installs the build dependencies it lacks.
deb:
	bash scripts/deb.sh $(BUILD)/deb

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
