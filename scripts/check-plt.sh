#!/bin/sh
# No call from inside a loopfast library to a name that library exports
# (every interposed libc call, and the lf_* API): such a call goes through
# the PLT (or, with -fno-plt, the GOT) and binds to whichever definition
# the dynamic linker picks first, which for read, write, close, poll, ...
# is loopfast's own interposer or another preloaded library's. Internal
# code calls the raw layer (src/fastpath/sys.c), REAL(), or a file's
# static alias (LF_LOCAL in src/fastpath/internal.h).
#
# usage: scripts/check-plt.sh LIB.so...   (make check passes the build's)
# Prints each offending LIB: NAME and exits 1; prints nothing and exits 0
# when there are none.
set -eu
bad=0
for so in "$@"; do
	defs=$(nm -D --defined-only "$so" | awk '{print $3}' | sort -u)
	refs=$(readelf -rW "$so" | awk '/JUMP_SLOT|GLOB_DAT/ {sub(/@.*/, "", $5); print $5}' | sort -u)
	for name in $(printf '%s\n' "$defs" "$refs" | sort | uniq -d); do
		echo "$so: calls its own exported $name through the dynamic linker"
		bad=1
	done
done
exit $bad
