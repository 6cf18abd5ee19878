#!/usr/bin/env bash
# make deb: builds the Debian packages (debian/) with dpkg-buildpackage and
# debhelper into OUT (default build/deb/), then prints what lintian says of
# them. The source tree is left as it was: the files git knows (committed
# or not, ignored ones left out) are copied to OUT/loopfast-VERSION, built
# there, and that copy is removed; OUT ends with the .deb files, the
# .changes, the .buildinfo and build.log. Installs the build dependencies that
# debian/control names (and lintian) when some are missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/build/deb}")
version=$(dpkg-parsechangelog -l "$root/debian/changelog" -S Version)

missing=$(cd "$root" && dpkg-checkbuilddeps 2>&1) || {
	echo "deb: installing the build dependencies (${missing##*: })"
	DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -q "$root" >/dev/null
}
command -v lintian >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q lintian >/dev/null

src="$out/loopfast-$version"
mkdir -p "$out"
rm -rf "$src" "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo "$out"/build.log
mkdir "$src"
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$root" && git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
		tar --null -T - -cf -) | tar -C "$src" -xf -
else
	tar -C "$root" --exclude-vcs --exclude='./build*' -cf - . | tar -C "$src" -xf -
fi
# The distribution's own tools, not whatever is first on PATH (a pyenv
# python3 has no `build` module, and its ABI is not Debian's). The build's
# output goes to a log; its tail is shown if it fails.
log="$out/build.log"
echo "deb: building in $src (log: $log)"
if ! (cd "$src" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -b -us -uc -jauto) >"$log" 2>&1; then
	tail -40 "$log"
	echo "deb: dpkg-buildpackage failed; the whole log: $log" >&2
	exit 1
fi
rm -rf "$src"
ls -1 "$out"/*.deb
# lintian's errors, warnings, notes and pedantic tags. It says no to
# running as root, so it runs as nobody where nobody can read the files
# (not under /root, mode 700).
changes=$(echo "$out"/loopfast_"${version}"_*.changes)
as=()
nobody=(setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/tmp)
if [ "$(id -u)" -eq 0 ] && "${nobody[@]}" test -r "$changes"; then as=("${nobody[@]}"); fi
echo "deb: lintian $(lintian --version | cut -d' ' -f2) -I --pedantic:"
"${as[@]}" lintian -I --pedantic "$changes" || true
