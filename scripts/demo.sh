#!/usr/bin/env bash
# The main job: the latency comparison table (loopfast-bench-latency(1)),
# its JSON and its chart, with sockperf's figure beside ours as a cross-check.
set -euo pipefail
build=${1:-build}
"$build/loopfast" bench latency --compare-sockperf --plot latency.png --json latency.json
echo "wrote latency.json and latency.png"
