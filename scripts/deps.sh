#!/usr/bin/env bash
# Installs what building and testing loopfast needs on Debian 12, only what
# is missing. Database servers for `loopfast bench app` are installed by
# that benchmark itself.
set -euo pipefail

pkgs=()
# The last line is Debian's packaging tools, for `make deb` and
# test/e2e/test_deb.py (the rest of debian/control's Build-Depends is above).
need() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || pkgs+=("$1"); }
for p in build-essential cmake pkg-config liburing-dev python3 python3-pip python3-venv \
	 sockperf redis-server redis-tools python3-redis curl passwd util-linux iproute2 procps valgrind clang iptables systemd \
	 busybox-static strace \
	 debhelper dh-python python3-all pybuild-plugin-pyproject lintian; do
	need "$p"
done
if [ ${#pkgs[@]} -gt 0 ]; then
	echo "deps: installing ${pkgs[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null
	apt-get install -y -q "${pkgs[@]}" >/dev/null
fi

# libFuzzer (test/fuzz): Debian ships it apart from clang, in
# libclang-rt-<major>-dev (clang 14 on Debian 12).
clang_major=$(clang -dumpversion 2>/dev/null | cut -d. -f1)
if [ -n "$clang_major" ] && ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
	clang -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
	echo "deps: installing libclang-rt-$clang_major-dev (libFuzzer)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "libclang-rt-$clang_major-dev" >/dev/null
fi

# pytest (with pytest-timeout: every test runs under a timeout) and
# matplotlib for whichever python3 is first on PATH: pip where it is allowed
# (a venv or pyenv), Debian's packages for the system python.
if ! python3 -c 'import pytest, pytest_timeout, matplotlib' 2>/dev/null; then
	if ! python3 -m pip install -q pytest pytest-timeout matplotlib 2>/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-pytest python3-pytest-timeout \
			python3-matplotlib >/dev/null
	fi
fi
python3 -c 'import pytest, pytest_timeout, matplotlib' ||
	{ echo "deps: pytest/pytest-timeout/matplotlib unavailable for $(command -v python3)" >&2; exit 1; }
# Go (test/e2e/test_signals.py builds a Go net/http server with cgo):
# Debian's golang-go, unless a go is already on PATH.
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
	echo "deps: installing golang-go"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go >/dev/null
fi
bash "$(dirname "$0")/compat-deps.sh"
# The kernel's count of system calls (`loopfast bench stream`'s JSON, used
# by test_shm.py) reads a tracepoint's id from tracefs: mount it where the
# machine has not (systemd does on Debian 12; a bare container may not).
if [ ! -e /sys/kernel/tracing/events/raw_syscalls/sys_enter/id ] && [ "$(id -u)" = 0 ]; then
	mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null ||
		echo "deps: tracefs not mounted: bench stream reports no system call counts" >&2
fi
