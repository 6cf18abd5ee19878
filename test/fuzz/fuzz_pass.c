/* libFuzzer target: the record of a passed tier socket (src/protocol/
 * pass.c, lf__pass_parse), which any process that can send to a socket
 * of the receiver's can write. The input: one byte, the number of
 * descriptors received with it (0-255: past the kernel's 253 too), then
 * the record memfd's bytes. Checked: memory safety, the answer never
 * depends on bytes past the length, and a record that parses names only
 * positions of its message: sockets among the application's descriptors,
 * memfds among the extras before the record, each extra exactly once, a
 * dup only of a socket named before. */
#include "pass.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lf_pass_rec recs[LF_PASS_RECS];
	struct lf_pass_hdr h;

	if (size < 1)
		return 0;
	size_t nfds = data[0], len = size - 1;
	/* An exact-size copy, so that ASan sees a read past the length. */
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		abort();
	memcpy(buf, data + 1, len);
	int k = lf__pass_parse(buf, len, nfds, &h, recs);
	free(buf);
	if (k < 0)
		return 0;
	if (k < 1 || k > LF_PASS_RECS || (uint32_t)k != h.n || nfds > LF_PASS_FDS || h.napp < 1 ||
	    h.napp >= nfds - 1 || len != LF_PASS_SIZE(k))
		abort();
	bool sock[LF_PASS_FDS] = { false }, mfd[LF_PASS_FDS] = { false };
	size_t nm = 0;
	for (int i = 0; i < k; i++) {
		const struct lf_pass_rec *r = &recs[i];
		if (r->sock >= h.napp || sock[r->sock] || (r->kind != 's' && r->kind != 'c'))
			abort();
		sock[r->sock] = true;
		if (r->mfd >= 0) {
			if ((uint32_t)r->mfd < h.napp || (size_t)r->mfd >= nfds - 1 || mfd[r->mfd])
				abort();
			mfd[r->mfd] = true;
			nm++;
		} else {
			int j = 0;
			while (j < i && recs[j].ino != r->ino)
				j++;
			if (r->mfd != -1 || j == i)
				abort();
		}
	}
	if (nm != nfds - 1 - h.napp)
		abort();
	return 0;
}
