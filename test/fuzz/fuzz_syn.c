/* libFuzzer target: lf__syn_marked, which reads the saved SYN of an
 * accepted connection (every byte the client's) for the MSS that says "my
 * hello is queued", and lf__syn_local, which reads its destination. The
 * input is the SYN as TCP_SAVED_SYN gives it (IP header onwards), in a
 * buffer of exactly its size so that ASan sees any read past it. Checked:
 * memory safety, an answer in {-1, 0, 1} and an endpoint of family AF_INET
 * or AF_INET6, and the same answers for the same bytes at the end of a
 * larger buffer (the parsers never look past `len`). */
#include "protocol.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *exact = malloc(size ? size : 1), *big = malloc(size + 64);

	if (!exact || !big)
		abort();
	memcpy(exact, data, size);
	memcpy(big, data, size);
	memset(big + size, 0x02, 64); /* would read as an MSS option */
	int r = lf__syn_marked(exact, size);
	if (r < -1 || r > 1 || lf__syn_marked(big, size) != r)
		abort();
	struct lf_ep a, b;
	bool ha = lf__syn_local(exact, size, &a), hb = lf__syn_local(big, size, &b);
	if (ha != hb || (ha && !lf__ep_equal(&a, &b)) || (ha && a.family != AF_INET && a.family != AF_INET6))
		abort();
	free(exact);
	free(big);
	return 0;
}
