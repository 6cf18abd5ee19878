#!/usr/bin/env bash
# Runs the test suites and decides the run from every exit status, the
# floors in test/floor.txt and the skips allowed in test/skips.allow; ends
# with a table of each suite's counts and wall time, and the last line is
# "N passed, N failed, N skipped". Without options: make test's suites;
# --extra: the long fuzz and the mutants (make test-extra); --all: both
# (make test-all); --only: a subset. See test/harness.py.
# usage: scripts/test.sh [BUILD_DIR [ASAN_BUILD_DIR]] [--extra | --all | --only SPEC...]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec python3 "$root/test/harness.py" "$@"
