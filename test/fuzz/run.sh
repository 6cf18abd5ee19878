#!/usr/bin/env bash
# Builds the fuzz targets (clang, libFuzzer, ASan, UBSan) in BUILD_DIR and
# runs each for SECONDS from the seeds in test/fuzz/seeds, in a fresh
# corpus (nothing is written to the source tree). A target passes when
# libFuzzer exited 0 and says it ran at least FUZZ_MIN_RUNS inputs (its
# "Done N runs in S second(s)"; default 10000): a target that dies at
# start-up, or runs no input, fails. Prints one line per target in the C
# runner's form ("ok   fuzz_name: N runs in S s", or "FAIL fuzz_name: ..."
# with the crashing input kept in BUILD_DIR/artifacts/), libFuzzer's own
# lines only after "  | ", and "N passed, N failed, N skipped"; exits 1 if
# any failed. test/harness.py runs it as the suite "fuzz".
# usage: [FUZZ_MIN_RUNS=N] test/fuzz/run.sh [BUILD_DIR [SECONDS [TARGET...]]]   (TARGET: name, syn, ring, pass)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-fuzz}
secs=${2:-30}
min_runs=${FUZZ_MIN_RUNS:-10000}
shift $(( $# > 2 ? 2 : $# ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(name syn ring pass)

if ! command -v clang >/dev/null; then
	echo "fuzz: clang is missing (scripts/deps.sh installs clang and libclang-rt-14-dev)" >&2
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
fi
mkdir -p "$build"
blog=$build/build.log
if ! cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DLF_FUZZ=ON -DLF_WERROR=ON >"$blog" 2>&1 ||
   ! cmake --build "$build" -j2 --target "${targets[@]/#/fuzz-}" >>"$blog" 2>&1; then
	tail -40 "$blog" | sed 's/^/  | /' >&2
	echo "fuzz: building the targets failed (log: $blog)" >&2
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
fi

# Seeds in the form each target reads: fuzz_name takes a length byte then
# sun_path (the abstract name's leading NUL included); fuzz_syn the SYN;
# fuzz_ring its program of 9-byte steps (seeds/ring.hex); fuzz_pass a byte
# (the descriptors received) and the record's bytes (seeds/pass.hex).
seed() {
	local t=$1 dir=$2
	python3 - "$t" "$dir" "$root/test/fuzz/seeds" <<'PY'
import os, sys
t, out, seeds = sys.argv[1:]
if t == "name":
    lines = open(os.path.join(seeds, "name.txt")).read().splitlines()
    blobs = [b"\0\0" + l.encode() for l in lines if l and not l.startswith("#")]
else:
    lines = open(os.path.join(seeds, f"{t}.hex")).read().splitlines()
    blobs = [bytes.fromhex(l) for l in lines if l and not l.startswith("#")]
for i, b in enumerate(blobs):
    with open(os.path.join(out, f"seed{i}"), "wb") as f:
        f.write(b)
PY
}

passed=0 failed=0
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
	corpus=$(mktemp -d)
	seed "$t" "$corpus"
	log="$build/fuzz_$t.log"
	# -max_total_time bounds the run; -timeout catches one input that hangs.
	"$build/fuzz-$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$build/artifacts/fuzz_$t-" "$corpus" >"$log" 2>&1
	rc=$?
	# libFuzzer's last words: "Done N runs in S second(s)".
	runs=$(sed -n 's/^Done \([0-9]*\) runs in [0-9]* second.*/\1/p' "$log" | tail -1)
	took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
	rm -rf "$corpus"
	if [ $rc -eq 0 ] && [ -n "$runs" ] && [ "$runs" -ge "$min_runs" ]; then
		echo "ok   fuzz_$t: ${runs} runs in ${took} s"
		passed=$((passed + 1))
		continue
	fi
	tail -30 "$log" | sed 's/^/  | /'
	if [ $rc -ne 0 ]; then
		why="exit status $rc (log $log, input in $build/artifacts/)"
	elif [ -z "$runs" ]; then
		why="libFuzzer never said how many inputs it ran (no 'Done N runs'; log $log)"
	else
		why="ran $runs inputs, fewer than FUZZ_MIN_RUNS=$min_runs (log $log)"
	fi
	echo "FAIL fuzz_$t: $why"
	failed=$((failed + 1))
done
echo "$passed passed, $failed failed, 0 skipped"
[ $failed -eq 0 ]
