/* The saved SYN of an accepted connection: did its client say that a hello
 * is queued (MSS LF_HELLO_MSS)? Peer input: every byte of the SYN is the
 * client's, so this parser is fuzzed (test/fuzz/fuzz_syn.c) and must stay
 * within `len` whatever the headers claim. */
#include "protocol.h"

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
