/* `loopfast bench udp`: the seed's UDP servers (traditional and RIO) and its
 * traffic generator. bench_udp.c drives runs; udp_run.c holds the run
 * helpers below (udp_now_ns() to udp_flush()); udp_servers.c and
 * udp_rio_servers.c hold the designs, and udp_designs.h their table;
 * udp_gen.c the generator and the kernel's drop counters. */
#ifndef LF_CLI_UDP_H
#define LF_CLI_UDP_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define UDP_MARKER_SIZE 1 /* a datagram of another size ends the run */
#define UDP_BATCH 64

/* One server run. The server counts datagrams of `size` bytes, does `work`
 * iterations on each and stops at the first datagram of another size or
 * when `stop` is set. */
struct udp_run {
	int fd;
	unsigned size, work, threads;
	atomic_bool stop;
	_Atomic uint64_t count;
	_Atomic uint64_t t_start;        /* CLOCK_MONOTONIC ns when receiving began (udp_started) */
	_Atomic uint64_t t_first, t_last; /* ... of the first and last datagram */
	atomic_bool marker;            /* the end marker was seen */
	int err;                       /* -errno from the server, 0 if fine */
};

uint64_t udp_now_ns(void);
/* A server calls this right before its first receive: in drain mode the
 * datagrams are already queued and the clock runs from here. */
void udp_started(struct udp_run *run);
/* Per-thread tally, merged into the run at the end of a batch. */
struct udp_tally {
	uint64_t count, first;
	bool stop, merged;
};
/* Handles one datagram; returns false once the end marker has been seen. */
static inline bool udp_datagram(const struct udp_run *run, struct udp_tally *t,
				const unsigned char *p, unsigned len)
{
	extern __thread volatile unsigned udp_sink;

	if (!t->first)
		t->first = udp_now_ns();
	if (len != run->size) {
		t->stop = true;
		return false;
	}
	if (run->work) {
		unsigned h = 0;
		for (unsigned i = 0; i < run->work; i++)
			h = h * 31 + p[i % len];
		udp_sink = h;
	}
	t->count++;
	return true;
}
/* Adds a batch's tally to the run (timestamps it); returns true to go on. */
bool udp_flush(struct udp_run *run, struct udp_tally *t);

/* The servers, each returning 0 or -errno: the traditional ones in
 * udp_servers.c ... */
int udp_serve_simple(struct udp_run *run);
int udp_serve_recvmmsg(struct udp_run *run);
int udp_serve_epoll(struct udp_run *run);
int udp_serve_epoll_mt(struct udp_run *run);
/* ... and the RIO ones in udp_rio_servers.c. */
int udp_serve_rio_polled(struct udp_run *run);
int udp_serve_rio_posted(struct udp_run *run);
int udp_serve_rio_sqpoll(struct udp_run *run);
int udp_serve_rio_polled_mt(struct udp_run *run);
int udp_serve_rio_event(struct udp_run *run);
int udp_serve_rio_port(struct udp_run *run);

/* Generator: sends `count` datagrams (or for `seconds`) of `size` bytes to
 * 127.0.0.1:port with sendmmsg; returns the number sent or -errno. */
long long udp_generate(uint16_t port, unsigned size, unsigned long long count, double seconds);
/* Sends one end-marker datagram. */
int udp_send_marker(int fd, uint16_t port);
/* The kernel's drop counter and receive-queue bytes of the UDP socket
 * bound to 127.0.0.1:port (/proc/net/udp). Returns 0 or -errno. */
int udp_socket_stat(uint16_t port, long long *drops, long long *rx_queue);
/* /proc/net/snmp Udp RcvbufErrors, or -errno. */
long long udp_rcvbuf_errors(void);

#endif
