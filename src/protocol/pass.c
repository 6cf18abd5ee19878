/* The passed tier socket's record (pass.h): its parser. Pure: its input
 * comes from whichever process sent the message. */
#include "pass.h"

#include <stdbool.h>
#include <string.h>

int lf__pass_parse(const void *buf, size_t len, size_t nfds, struct lf_pass_hdr *h, struct lf_pass_rec *out)
{
	bool sock_named[LF_PASS_FDS] = { false }, mfd_named[LF_PASS_FDS] = { false };
	size_t nmfd = 0;

	if (len < sizeof(*h) || nfds < 2 || nfds > LF_PASS_FDS)
		return -1;
	memcpy(h, buf, sizeof(*h));
	if (h->magic != LF_PASS_MAGIC || h->n < 1 || h->n > LF_PASS_RECS || len != LF_PASS_SIZE(h->n) ||
	    h->napp < 1 || h->napp >= nfds - 1)
		return -1;
	memcpy(out, (const char *)buf + sizeof(*h), (size_t)h->n * sizeof(*out));
	for (uint32_t i = 0; i < h->n; i++) {
		const struct lf_pass_rec *r = &out[i];
		if (r->sock >= h->napp || sock_named[r->sock] || (r->kind != 's' && r->kind != 'c') ||
		    (r->flags & ~LF_PASS_FLAGS) || r->pad)
			return -1;
		sock_named[r->sock] = true;
		if (r->mfd >= 0) {
			if ((uint32_t)r->mfd < h->napp || (size_t)r->mfd >= nfds - 1 || mfd_named[r->mfd])
				return -1;
			for (uint32_t j = 0; j < i; j++) /* one memfd per connection */
				if (out[j].ino == r->ino)
					return -1;
			mfd_named[r->mfd] = true;
			nmfd++;
			continue;
		}
		if (r->mfd != -1)
			return -1;
		uint32_t j = 0;
		while (j < i && out[j].ino != r->ino)
			j++;
		if (j == i) /* a dup of nothing named before */
			return -1;
	}
	if (nmfd != nfds - 1 - h->napp) /* a memfd nobody named */
		return -1;
	return (int)h->n;
}
