#!/usr/bin/env bash
# Runs every test suite and decides the run from every exit status, the
# floors in test/floor.txt and the skips allowed in test/skips.allow; the
# last line is "N passed, N failed, N skipped". See test/harness.py.
# usage: scripts/test.sh [BUILD_DIR [ASAN_BUILD_DIR]] [--only SPEC]...
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec python3 "$root/test/harness.py" "$@"
