#!/usr/bin/env python3
"""System calls per connection at each end of `loopfast bench connect`.

Runs one row of each path (one client unless told) under `strace -ff` (one
trace per process), finds the client (the process that writes the 1-byte
requests) and the server (the one that answers them), and divides each
one's system calls, counted from its first connection to its last, by the
connections the client completed. The benchmark's own check of each
eighth connection's path (kpath_fast_end: fstat, getsockopt, a sock_diag
query) is left out: it is the benchmark's, not the path's.

    python3 bench/connect/syscalls.py [--build build] [--paths tcp,fast] [--time 1] [--clients 1]

Prints one table per path: each system call's count per connection at the
client and at the server, and the totals. Needs strace.
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

CALL = re.compile(r'^([a-z0-9_]+)\((\d+)?')


def calls(lines):
    """Names of the completed calls, the benchmark's path checks left out."""
    skip_fd, tcp_domain = None, False
    for i, line in enumerate(lines):
        m = CALL.match(line)
        if not m:
            continue
        name, fd = m.group(1), m.group(2)
        # kpath_fast_end starts with fstat then SO_DOMAIN on the same fd
        # (the library's own fstat, in its connect, is followed by geteuid)
        if (skip_fd is None and name == 'newfstatat' and 'AT_EMPTY_PATH' in line and i + 1 < len(lines) and
                lines[i + 1].startswith(f'getsockopt({fd}, SOL_SOCKET, SO_DOMAIN')):
            skip_fd, tcp_domain = fd, False
            continue
        if skip_fd is not None:
            # It ends with SO_PEERCRED on the fd (a Unix socket), with
            # SO_TYPE when SO_DOMAIN said TCP, or (a Unix socket without
            # a peer) where the benchmark goes on: epoll, or its close.
            mine = name == 'getsockopt' and fd == skip_fd
            if mine and 'SO_DOMAIN' in line:
                tcp_domain = '[2]' in line or '[10]' in line
            if (mine and 'SO_PEERCRED' in line) or (mine and 'SO_TYPE' in line and tcp_domain):
                skip_fd = None
                continue
            if not (name.startswith('epoll') or (name == 'close' and fd == skip_fd)):
                continue
            skip_fd = None
        yield name


def window(lines, first, last):
    """The lines from the first that matches `first` to the last that matches `last`."""
    i = next((k for k, l in enumerate(lines) if first.search(l)), None)
    j = max((k for k, l in enumerate(lines) if last.search(l)), default=None)
    return lines[i:j + 1] if i is not None and j is not None else []


def measure(build, path, secs, clients):
    with tempfile.TemporaryDirectory() as d:
        cmd = ['strace', '-ff', '-o', os.path.join(d, 't'), os.path.join(build, 'loopfast'), 'bench', 'connect',
               '--paths', path, '--clients', str(clients), '--time', str(secs), '--warmup', '0', '--repeat', '1']
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        traces = [open(f, errors='replace').read().splitlines() for f in glob.glob(os.path.join(d, 't.*'))]
    req = re.compile(r'^write\(\d+, "x", 1\)\s+= 1')
    ans = re.compile(r'^write\(\d+, "y", 1\)\s+= 1')
    client = next(t for t in traces if any(req.match(l) for l in t))
    server = next(t for t in traces if any(ans.match(l) for l in t))
    n = sum(1 for l in client if re.match(r'^read\(\d+, "y", 1\)\s+= 1', l))
    client = window(client, re.compile(r'^socket\(AF_INET'), re.compile(r'^read\(\d+, "y", 1\)\s+= 1'))
    server = window(server, re.compile(r'^accept4?\('), ans)
    return n, [collections.Counter(calls(t)) for t in (client, server)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default='build')
    ap.add_argument('--paths', default='tcp,fast')
    ap.add_argument('--time', type=float, default=1.0)
    ap.add_argument('--clients', type=int, default=1)
    a = ap.parse_args()
    for path in a.paths.split(','):
        n, (c, s) = measure(a.build, path, a.time, a.clients)
        if not n:
            sys.exit(f'{path}: no connection completed')
        print(f'{path}: {n} connections, system calls per connection (strace -ff)')
        print(f'  {"call":<14} {"client":>7} {"server":>7}')
        for name in sorted(set(c) | set(s), key=lambda k: -(c[k] + s[k])):
            if (c[name] + s[name]) / n < 0.005:
                continue  # the benchmark's own setup, once
            print(f'  {name:<14} {c[name] / n:7.2f} {s[name] / n:7.2f}')
        ct, st = sum(c.values()) / n, sum(s.values()) / n
        print(f'  {"total":<14} {ct:7.1f} {st:7.1f}   both ends {ct + st:.1f}')


if __name__ == '__main__':
    main()
