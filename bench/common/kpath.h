/* The kernel's verdict on one end of a connection, for the benchmarks. */
#ifndef LF_BENCH_KPATH_H
#define LF_BENCH_KPATH_H

#include <stdbool.h>
#include <sys/types.h>

/* 1 if fd is a Unix stream socket connected (sock_diag's UNIX_DIAG_PEER
 * names a live peer) to a socket that process `peer` connected or listened
 * on (SO_PEERCRED): this end of a fast-path connection between this process
 * and `peer`. 0 if it is anything else (a TCP socket: plain TCP). -errno if
 * the kernel would not answer. */
int kpath_fast_end(int fd, pid_t peer);

/* Whether this process maps the shared-memory tier's memfd (its name in
 * /proc/self/maps): a row of the tier is the tier's only then. */
bool kpath_maps_tier(void);

#endif
