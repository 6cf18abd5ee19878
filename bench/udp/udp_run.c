/* The run helpers every server, the generator and the driver share: the
 * clock, the start of receiving, and a batch's tally merged into the run.
 * Called by udp_servers.c, udp_rio_servers.c, udp_gen.c and bench_udp.c;
 * calls nothing of bench/udp. */
#include "udp.h"

#include <time.h>

__thread volatile unsigned udp_sink;

uint64_t udp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void udp_started(struct udp_run *run)
{
	uint64_t now = udp_now_ns(), old = atomic_load(&run->t_start);

	while ((!old || now < old) && !atomic_compare_exchange_weak(&run->t_start, &old, now))
		;
}

bool udp_flush(struct udp_run *run, struct udp_tally *t)
{
	uint64_t old;

	if (t->first && !t->merged) {
		old = atomic_load(&run->t_first);
		while ((!old || t->first < old) &&
		       !atomic_compare_exchange_weak(&run->t_first, &old, t->first))
			;
		t->merged = true;
	}
	if (t->count) {
		uint64_t now = udp_now_ns();

		old = atomic_load(&run->t_last);
		while (now > old && !atomic_compare_exchange_weak(&run->t_last, &old, now))
			;
		atomic_fetch_add(&run->count, t->count);
		t->count = 0;
	}
	if (t->stop) {
		atomic_store(&run->marker, true);
		atomic_store(&run->stop, true);
	}
	return !atomic_load(&run->stop);
}
