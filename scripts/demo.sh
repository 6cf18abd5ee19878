#!/usr/bin/env bash
# The main job: the latency comparison table.
set -euo pipefail
build=${1:-build}
"$build/loopfast" bench latency --plot latency.png --json latency.json
