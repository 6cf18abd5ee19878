/* bench/stream's parts: bench_stream.c (the command, the throughput
 * runs) calls stream_idle.c for --idle. */
#ifndef LF_BENCH_STREAM_H
#define LF_BENCH_STREAM_H

/* `loopfast bench stream --idle N`: N idle connections on each path of the
 * mask (bit 0 tcp, 1 fast, 2 fast+shm), after a burst of `burst` bytes each
 * way on each (0: never used); the table, and JSON to `json` (NULL: none).
 * 0, or the error printer's 2. */
int lf_bench_stream_idle(unsigned paths, unsigned long long n, unsigned long long burst, const char *json);

#endif
