#!/usr/bin/env bash
# Installs the real programs test/compat/ runs under `loopfast run`, from
# Debian 12's packages, only what is missing. Services are never started by
# the packages (policy-rc.d), the tests start their own on free ports.
# usage: scripts/compat-deps.sh   (scripts/deps.sh calls it)
set -euo pipefail

pkgs=()
need() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || pkgs+=("$1"); }
for p in openssh-server openssh-client nginx wrk php-fpm memcached libmemcached-tools haproxy redis-server \
	 redis-tools socat iperf3 mosquitto mosquitto-clients curl openssl python3 python3-aiohttp gunicorn \
	 caddy etcd-server etcd-client busybox-static; do
	need "$p"
done
# node and a JDK may come from elsewhere (the machine image has both): use
# what is on PATH, and Debian's packages only where nothing is.
command -v node >/dev/null || need nodejs
command -v javac >/dev/null || need default-jdk-headless

[ ${#pkgs[@]} -gt 0 ] || exit 0
echo "compat-deps: installing ${pkgs[*]}"
# Without a policy, installing nginx, sshd, memcached … would start them on
# their default ports. Where the machine has no policy-rc.d, add one that
# denies every start for the length of the install.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null
