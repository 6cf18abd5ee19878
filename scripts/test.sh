#!/usr/bin/env bash
# Runs every test and prints one summary line "N passed, N failed, N skipped".
# usage: scripts/test.sh BUILD_DIR ASAN_BUILD_DIR
set -uo pipefail
build=${1:-build}
asan=${2:-build-asan}
root=$(cd "$(dirname "$0")/.." && pwd)
passed=0 failed=0 skipped=0

count() { # adds the "N passed, N failed[, N skipped]" numbers of a log
	local line
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
	[ -n "$line" ] || { failed=$((failed + 1)); echo "no summary in $1"; return; }
	passed=$((passed + $(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')))
	failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
	if echo "$line" | grep -q skipped; then
		skipped=$((skipped + $(echo "$line" | sed -E 's/.* ([0-9]+) skipped.*/\1/')))
	fi
}

run_c_tests() { # dir label
	for t in "$1"/test-*; do
		[ -x "$t" ] || continue
		echo "== $2 $(basename "$t")"
		log=$(mktemp)
		"$t" 2>&1 | tee "$log"
		count "$log"
		rm -f "$log"
	done
}

run_c_tests "$build" "c"

run_pytest() { # label, then pytest arguments; env set by the caller
	echo "== $1 (pytest)"
	shift
	local log line n k
	log=$(mktemp)
	LOOPFAST_BUILD="$root/$build" python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$log"
	line=$(grep -E '[0-9]+ (passed|failed|error)' "$log" | tail -n 1)
	for k in passed failed skipped error errors; do
		n=$(echo "$line" | grep -oE "[0-9]+ $k\b" | grep -oE '^[0-9]+' || true)
		case $k in
		passed) passed=$((passed + ${n:-0})) ;;
		skipped) skipped=$((skipped + ${n:-0})) ;;
		*) failed=$((failed + ${n:-0})) ;;
		esac
	done
	[ -n "$line" ] || { echo "pytest printed no summary"; failed=$((failed + 1)); }
	rm -f "$log"
}

run_pytest "e2e" "$root/test/e2e"
# The comparison suite again with busy polling on every fast-path socket
# (back-off off, so that the spin really runs whatever the load).
LOOPFAST_TEST_SPIN_US=50 LOOPFAST_SPIN_BACKOFF=0 run_pytest "e2e with spinning" "$root/test/e2e/test_compare.py"
run_pytest "compat" "$root/test/compat"  # real programs from Debian's packages (scripts/compat-deps.sh)

echo "== building under ASan+UBSan"
if cmake -S "$root" -B "$asan" -DLF_SANITIZE=ON -DLF_WERROR=ON >/dev/null && cmake --build "$asan" -j2 >/dev/null; then
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 run_c_tests "$asan" "asan"
else
	echo "ASan build failed"
	failed=$((failed + 1))
fi

echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
