/* The socket options the fast path cannot keep: set on a socket before
 * its connect or listen, they pin it to plain TCP for life (timestamps,
 * MSG_ZEROCOPY's completions, TCP_INQ's control message, keys, repair,
 * a saved SYN, a connect that sends no SYN). One list, for the preload
 * (sockopt.c, which sees the program's sets) and for loopfast run's
 * supervisor (which sees none and asks the kernel: lf__sopt_pinned_on).
 * Compiled alone into the library and the CLI: only the raw-call layer. */
#include "sockopt.h"
#include "sys.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>

#ifndef TCP_AO_ADD_KEY
#define TCP_AO_ADD_KEY 38
#define TCP_AO_REPAIR 42
#endif

static const struct pin {
	short level, first, last;
	bool any; /* any set pins (a key: nothing to turn off), not only one that turns it on */
} pins[] = {
	{ SOL_SOCKET, SO_TIMESTAMP_OLD, SO_TIMESTAMP_OLD, false },
	{ SOL_SOCKET, SO_TIMESTAMPNS_OLD, SO_TIMESTAMPNS_OLD, false },
	{ SOL_SOCKET, SO_TIMESTAMPING_OLD, SO_TIMESTAMPING_OLD, false },
	{ SOL_SOCKET, SO_ZEROCOPY, SO_ZEROCOPY, false },
	{ SOL_SOCKET, SO_TIMESTAMP_NEW, SO_TIMESTAMPING_NEW, false },
	{ IPPROTO_TCP, TCP_MD5SIG, TCP_MD5SIG, true },
	{ IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR, false },
	{ IPPROTO_TCP, TCP_SAVE_SYN, TCP_SAVE_SYN, false },
	{ IPPROTO_TCP, TCP_FASTOPEN_CONNECT, TCP_FASTOPEN_CONNECT, false },
	{ IPPROTO_TCP, TCP_MD5SIG_EXT, TCP_MD5SIG_EXT, true },
	{ IPPROTO_TCP, TCP_INQ, TCP_INQ, false },
	{ IPPROTO_TCP, TCP_AO_ADD_KEY, TCP_AO_REPAIR, true },
};
#define NPINS (sizeof(pins) / sizeof(pins[0]))

bool lf__sopt_turns_on(const void *val, socklen_t len)
{
	const unsigned char *p = val;

	for (socklen_t i = 0; p && i < len && i < 16; i++)
		if (p[i])
			return true;
	return false;
}

bool lf__sopt_pins(int level, int opt, const void *val, socklen_t len)
{
	for (unsigned i = 0; i < NPINS; i++)
		if (pins[i].level == level && opt >= pins[i].first && opt <= pins[i].last)
			return pins[i].any || lf__sopt_turns_on(val, len);
	return false;
}

/* Asks the kernel each option in turn. A key has no get (TCP_MD5SIG) or
 * answers an error without one: such a set goes unseen here.
 * ENOPROTOOPT is the kernel's answer for an option its level does not
 * know how to get (TCP_MD5SIG, TCP-AO's in a kernel built without it),
 * the same for every TCP socket: such an option is not asked again
 * (7 of the 17 gets on this machine's kernel). */
int lf__sopt_pinned_on(int fd)
{
	static _Atomic unsigned no_get[NPINS]; /* bit k: pins[i].first + k said ENOPROTOOPT */

	for (unsigned i = 0; i < NPINS; i++)
		for (int opt = pins[i].first; opt <= pins[i].last; opt++) {
			unsigned char v[256] = { 0 };
			socklen_t l = sizeof(v);
			unsigned bit = 1u << (opt - pins[i].first);
			if (no_get[i] & bit)
				continue;
			if (lf__sys_getsockopt(fd, pins[i].level, opt, v, &l) == 0) {
				if (lf__sopt_turns_on(v, l))
					return pins[i].level << 16 | opt;
			} else if (errno == ENOPROTOOPT) {
				no_get[i] |= bit;
			}
		}
	return 0;
}
