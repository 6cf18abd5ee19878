/* Per-process counts of what the negotiation did (process.h, enum
 * lf_event), for `loopfast status`: kept in a small memfd page named
 * "loopfast-stats", which the command reads through /proc/PID/fd (same uid
 * or root). Made on the first count; a forked child makes its own. */
#include "fdtab.h"
#include "process.h"
#include "sys.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

static struct lf_stats *stats;
static int stats_fd = -1;

/* fork's child (fork.c). */
void lf__stats_fork_child(void)
{
	/* The child's counts are its own: drop the parent's page and close
	 * the child's copy of its descriptor, so that each page is held by
	 * the process that counts in it alone (`loopfast status` finds a
	 * process's counts by the pages it holds). The child makes its own
	 * page at its first count. */
	if (stats)
		munmap(stats, sizeof(*stats));
	if (stats_fd >= 0) {
		lf__fd_unhide(stats_fd);
		lf__sys_close(stats_fd);
	}
	stats = NULL;
	stats_fd = -1;
}

static struct lf_stats *page(void)
{
	struct lf_stats *p = __atomic_load_n(&stats, __ATOMIC_ACQUIRE);

	if (p)
		return p;
	lf__fork_init();
	int fd = memfd_create(LF_STATS_NAME, MFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (ftruncate(fd, sizeof(*p)) ||
	    (p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		lf__sys_close(fd);
		return NULL;
	}
	p->magic = LF_STATS_MAGIC;
	p->version = LF_STATS_VERSION;
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
