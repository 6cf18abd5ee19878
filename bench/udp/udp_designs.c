/* The table of server designs that `loopfast bench udp` runs, in the order
 * its table and JSON list them. The servers live in udp_servers.c and
 * udp_rio_servers.c; this table is the only file that names them all. */
#include "udp_designs.h"

#include <string.h>

const struct udp_design udp_designs[] = {
	{ "simple", false, false, udp_serve_simple, "blocking recv loop (seed: Simple Polled UDP)" },
	{ "recvmmsg", false, false, udp_serve_recvmmsg, "blocking recvmmsg, 64 per call" },
	{ "epoll", false, false, udp_serve_epoll, "epoll, one thread (seed: IOCP UDP)" },
	{ "epoll-mt", true, false, udp_serve_epoll_mt, "epoll, N threads (seed: IOCP MT UDP)" },
	{ "rio-posted", false, true, udp_serve_rio_posted, "RIO polled, 512 posted fixed-buffer receives (seed: RIO Polled UDP)" },
	{ "rio-polled", false, true, udp_serve_rio_polled, "RIO polled, multishot receive + buffer ring" },
	{ "rio-polled-mt", true, true, udp_serve_rio_polled_mt, "RIO polled, N threads, a queue pair and multishot each on the one socket" },
	{ "rio-sqpoll", false, true, udp_serve_rio_sqpoll, "RIO polled, multishot, receives done by a kernel SQPOLL thread" },
	{ "rio-event", false, true, udp_serve_rio_event, "RIO event-driven (eventfd + notify), multishot (seed: RIO Event Driven UDP)" },
	{ "rio-port", false, true, udp_serve_rio_port, "RIO completion port, one thread, multishot (seed: RIO IOCP UDP)" },
	{ "rio-port-mt", true, true, udp_serve_rio_port, "RIO completion port, N threads, multishot (seed: RIO IOCP MT UDP)" },
};
const unsigned udp_ndesigns = sizeof(udp_designs) / sizeof(udp_designs[0]);

int udp_find_design(const char *name)
{
	for (unsigned i = 0; i < udp_ndesigns; i++)
		if (!strcmp(udp_designs[i].name, name))
			return (int)i;
	return -1;
}
