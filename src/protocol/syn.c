/* The saved SYN of an accepted connection: did its client say that a hello
 * is queued (MSS LF_HELLO_MSS)? Peer input: every byte of the SYN is the
 * client's, so this parser is fuzzed (test/fuzz/fuzz_syn.c) and must stay
 * within `len` whatever the headers claim. */
#include "protocol.h"

#include <string.h>

int lf__syn_marked(const uint8_t *syn, size_t len)
{
	if (len < 20)
		return -1;
	size_t off = (syn[0] >> 4) == 4 ? (size_t)(syn[0] & 15) * 4 : 40; /* no extension headers on loopback */
	if (off + 20 > len)
		return -1;
	const uint8_t *tcp = syn + off;
	size_t end = off + (size_t)(tcp[12] >> 4) * 4;
	if (end > len)
		return -1;
	for (size_t i = off + 20; i < end;) {
		uint8_t kind = syn[i];
		if (kind == 0)
			break;
		if (kind == 1) {
			i++;
			continue;
		}
		if (i + 1 >= end || syn[i + 1] < 2 || i + syn[i + 1] > end)
			break;
		if (kind == 2 && syn[i + 1] == 4)
			return ((syn[i + 2] << 8) | syn[i + 3]) == LF_HELLO_MSS;
		i += syn[i + 1];
	}
	return 0;
}

/* The SYN's destination, its IP header's address and its TCP header's
 * port: the local end of the connection accepted from it (the kernel
 * takes the accepted socket's local address from these very headers, so
 * this is getsockname's answer, in lf__ep_from_sockaddr's form). False when they are not all within len. */
bool lf__syn_local(const uint8_t *syn, size_t len, struct lf_ep *ep)
{
	size_t off;

	memset(ep, 0, sizeof(*ep));
	if (len >= 20 && (syn[0] >> 4) == 4 && (syn[0] & 15) >= 5) {
		off = (size_t)(syn[0] & 15) * 4;
		ep->family = AF_INET;
		memcpy(&ep->addr.v4, syn + 16, 4);
	} else if (len >= 40 && (syn[0] >> 4) == 6) {
		off = 40; /* no extension headers on loopback */
		ep->family = AF_INET6;
		memcpy(&ep->addr.v6, syn + 24, 16);
		if (IN6_IS_ADDR_V4MAPPED(&ep->addr.v6)) { /* as lf__ep_from_sockaddr keeps it */
			ep->family = AF_INET;
			memcpy(&ep->addr.v4, syn + 36, 4);
		}
	} else {
		return false;
	}
	if (off + 4 > len)
		return false;
	ep->port = (uint16_t)(syn[off + 2] << 8 | syn[off + 3]);
	return true;
}
