/* Per-process counts of what the negotiation did (internal.h, enum
 * lf_event), for `loopfast status`: kept in a small memfd page named
 * "loopfast-stats", which the command reads through /proc/PID/fd (same uid
 * or root). Made on the first count; a forked child makes its own. */
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#define STATS_MAGIC 0x5453464cu /* "LFST" */

struct lf_stats {
	uint32_t magic, version;
	atomic_ullong count[LF_NEVENTS];
};

static struct lf_stats *stats;
static int stats_fd = -1;
static pthread_once_t child_once = PTHREAD_ONCE_INIT;

static void forget(void)
{
	/* The child's counts are its own: drop the parent's page (the
	 * descriptor stays the parent's; the child makes a new one). */
	if (stats)
		munmap(stats, sizeof(*stats));
	stats = NULL;
	stats_fd = -1;
}

static void at_fork(void)
{
	pthread_atfork(NULL, NULL, forget);
}

static struct lf_stats *page(void)
{
	struct lf_stats *p = __atomic_load_n(&stats, __ATOMIC_ACQUIRE);

	if (p)
		return p;
	pthread_once(&child_once, at_fork);
	int fd = memfd_create("loopfast-stats", MFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (ftruncate(fd, sizeof(*p)) ||
	    (p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		lf__sys_close(fd);
		return NULL;
	}
	p->magic = STATS_MAGIC;
	p->version = 1;
	struct lf_stats *expected = NULL;
	if (!__atomic_compare_exchange_n(&stats, &expected, p, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		munmap(p, sizeof(*p));
		lf__sys_close(fd);
		return expected;
	}
	lf__fd_hide(fd, &stats_fd);
	return p;
}

void lf__count(enum lf_event ev)
{
	struct lf_stats *p = page();

	if (p && ev < LF_NEVENTS)
		atomic_fetch_add_explicit(&p->count[ev], 1, memory_order_relaxed);
}
