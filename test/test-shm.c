/* The shm tier's quiet reads (src/fastpath/shm_spin.c), and its give-back's
 * pace (shm_mem.c, below). Quiet reads: a non-blocking
 * read of an empty ring answers EAGAIN without looking at its socket only
 * while nothing can have come since its last look. Whatever can have
 * brought something (the peer's fin, an edge registration, a token owed,
 * a wait of the process, a signal to the thread, another thread) ends the
 * quiet at once, not a window later: a read then looks, and sees the end
 * the kernel already has.
 *
 * Built with the library's sources: the predicate is the library's own. */
#include "internal.h"
#include "shm.h"
#include "shm_conn.h"
#include "runner.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* Checked within WINDOW_NS of the look (less than the library's window,
 * shm_spin.c's LOOK_NS): what ends the quiet then is the change, not time. */
#define WINDOW_NS 10000u

static struct lf_ring_hdr hdr;
static struct lf_shm_conn c = { .rx.h = &hdr };

/* Another thread that asks when told (spinning: a hand-off of about a
 * microsecond, inside the window). */
static atomic_int asks, answers;
static atomic_bool answer;

static void *asker(void *arg)
{
	(void)arg;
	for (int seen = 0; seen >= 0;) {
		int n = atomic_load(&asks);
		if (n == seen)
			continue;
		seen = n;
		if (n > 0)
			atomic_store(&answer, lf__shm_spin_quiet(&c, lf__sys_now_ns()));
		atomic_store(&answers, n);
		if (n < 0)
			break;
	}
	return NULL;
}

static bool ask_other_thread(void)
{
	int n = atomic_fetch_add(&asks, 1) + 1;
	while (atomic_load(&answers) != n)
		;
	return atomic_load(&answer);
}

static void fin(void) { atomic_store(&hdr.fin, 1); }
static void edges(void) { atomic_store(&hdr.edges, 1); }
static void owed(void) { c.owed = 1; }
static void waited(void) { lf__shm_waited(); }
static void signalled(void) { atomic_fetch_add(&lf__sig_seen, 1); }

/* Quiet after a look and then change(); NULL: nothing happened since. A
 * run slower than WINDOW_NS (the test preempted) proves nothing: again. */
static bool quiet_after(void (*change)(void), bool other_thread)
{
	lf__shm_used = true;
	for (int tries = 0; tries < 10000; tries++) {
		memset(&hdr, 0, sizeof(hdr));
		c.owed = 0;
		lf__shm_spin_looked(&c, atomic_load(&lf__shm_waits));
		uint64_t t0 = c.looked_ns;
		if (change)
			change();
		bool quiet = other_thread ? ask_other_thread() : lf__shm_spin_quiet(&c, lf__sys_now_ns());
		if (lf__sys_now_ns() - t0 < WINDOW_NS)
			return quiet;
	}
	ASSERT(!"never asked within 10 us of the look");
	return false;
}

static void quiet_right_after_a_look(void) { ASSERT(quiet_after(NULL, false)); }
static void the_peers_fin_ends_it(void) { ASSERT(!quiet_after(fin, false)); }
static void an_edge_registration_ends_it(void) { ASSERT(!quiet_after(edges, false)); }
static void a_token_owed_ends_it(void) { ASSERT(!quiet_after(owed, false)); }
static void a_wait_ends_it(void) { ASSERT(!quiet_after(waited, false)); }
static void a_signal_ends_it(void) { ASSERT(!quiet_after(signalled, false)); }

/* Another thread's signals are not the looker's: it is never quiet. */
static void another_thread_is_not_quiet(void)
{
	pthread_t t;
	ASSERT_EQ(pthread_create(&t, NULL, asker, NULL), 0);
	bool quiet = quiet_after(NULL, true);
	atomic_store(&asks, -1);
	pthread_join(t, NULL);
	ASSERT(!quiet);
}

static void time_ends_it(void)
{
	lf__shm_spin_looked(&c, atomic_load(&lf__shm_waits));
	memset(&hdr, 0, sizeof(hdr));
	c.owed = 0;
	usleep(100000); /* far longer than the window */
	ASSERT(!lf__shm_spin_quiet(&c, lf__sys_now_ns()));
}

/* The give-back's pace (shm_mem.c): a ring that carried small messages
 * (a ping-pong) gives its pages back as soon as its reader finds it empty,
 * even right after its last give-back; one that carried large reads is
 * due, and given back by a sweep once 10 ms have passed. A memfd ring:
 * a byte written is gone (0) once punched. */
static struct lf_ring_hdr ghdr;
static struct lf_shm_conn g = { .rx.h = &ghdr };

/* A ring's data area in a memfd, as the tier's (NULL: it could not be made). */
static unsigned char *memfd_ring(const char *name)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, LF_RING_SIZE) != 0)
		return NULL;
	unsigned char *data = mmap(NULL, LF_RING_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return data == MAP_FAILED ? NULL : data;
}

static void ring_with_a_byte(uint64_t passed, uint64_t emptied)
{
	static unsigned char *data;
	if (!data) {
		data = memfd_ring("test-shm-give-back");
		ASSERT(data);
		pthread_mutex_init(&g.rxl, NULL);
	}
	memset(&ghdr, 0, sizeof(ghdr));
	g.rx.data = data;
	g.rx.area = LF_RING_SIZE;
	g.rx.pos = 1000000 + passed;
	g.trimmed = 1000000;
	g.emptied = emptied;
	g.trim_ns = lf__sys_now_ns(); /* given back just now */
	atomic_store(&ghdr.tail, g.rx.pos);  /* empty */
	atomic_store(&ghdr.wbusy, 2);        /* the writer is not copying */
	data[4096] = 7;
}

/* The pace is shm_mem.c's GIVE_BACK_NS. A round whose checks came later
 * than that after its last give-back (the test preempted: with three busy
 * loops on two CPUs, 1 run in 400 was, and failed) is past the pace, where
 * paced and unpaced rings alike are given back: it proves nothing, and is
 * taken off the due list and tried again. */
#define PACE_NS (10u * 1000u * 1000u)

static bool in_pace(uint64_t since)
{
	if (lf__sys_now_ns() - since < PACE_NS)
		return true;
	lf__shm_mem_forget(&g);
	return false;
}

static void small_messages_give_back_at_once(void)
{
	for (int tries = 0; tries < 1000; tries++) {
		ring_with_a_byte(30000, 400); /* 75 bytes a read */
		uint64_t since = g.trim_ns;
		lf__shm_mem_idle(&g);
		if (!in_pace(since))
			continue;
		ASSERT(g.trimmed == g.rx.pos && g.rx.data[4096] == 0);
		ASSERT(atomic_load(&lf__shm_due) == 0);
		return;
	}
	ASSERT(!"never checked within 10 ms of the give-back");
}

static void large_reads_are_paced_then_swept(void)
{
	for (int tries = 0; tries < 1000; tries++) {
		ring_with_a_byte(300000, 4); /* 75,000 bytes a read */
		uint64_t since = g.trim_ns;
		lf__shm_mem_idle(&g);
		bool kept = g.trimmed == 1000000 && g.rx.data[4096] == 7 && atomic_load(&lf__shm_due) == 1;
		lf__shm_mem_sweep(); /* too soon: still due */
		bool still = g.rx.data[4096] == 7 && atomic_load(&lf__shm_due) == 1;
		if (!in_pace(since))
			continue;
		ASSERT(kept);
		ASSERT(still);
		usleep(11000);
		lf__shm_mem_sweep();
		ASSERT(g.trimmed == g.rx.pos && g.rx.data[4096] == 0);
		ASSERT(atomic_load(&lf__shm_due) == 0);
		return;
	}
	ASSERT(!"never checked within 10 ms of the give-back");
}

/* A give-back ends with a wake-up: a writer that met it (trim) and went
 * to wait for its end (shm_io.c, wait_trim: want_space, then a futex on
 * space_seq) is woken by the reader that punched. A give-back made where
 * no token is taken (the empty-ring look of a ping-pong whose pushes were
 * handed off) woke none: its writer slept out its 20 ms slice, a 20 ms
 * round trip in every 100,000-message spinning ping-pong. */
static void a_give_back_wakes_a_writer_that_waits_for_it(void)
{
	for (int tries = 0; tries < 1000; tries++) {
		ring_with_a_byte(30000, 400);
		atomic_store(&ghdr.want_space, 1);
		atomic_store(&ghdr.space_seq, 5);
		uint64_t since = g.trim_ns;
		lf__shm_mem_idle(&g);
		if (!in_pace(since))
			continue;
		ASSERT(g.trimmed == g.rx.pos && g.rx.data[4096] == 0);
		ASSERT_EQ(atomic_load(&ghdr.want_space), 0);
		ASSERT_EQ(atomic_load(&ghdr.space_seq), 6);
		return;
	}
	ASSERT(!"never checked within 10 ms of the give-back");
}

/* A non-blocking read of an empty ring looks at it before EAGAIN only when
 * it polls again (its last such answer under shm_spin.c's AGAIN_NS ago),
 * and takes what is there. `now` is the caller's clock: given here. */
static struct lf_ring_hdr phdr;
static unsigned char pdata[LF_RING_SIZE];
static struct lf_shm_conn p = { .rx = { .h = &phdr, .data = pdata, .area = LF_RING_SIZE, .size = LF_RING_SIZE,
					 .limit = LF_RING_SIZE } };

static void a_first_poll_answers_without_looking(void)
{
	memset(&phdr, 0, sizeof(phdr));
	uint64_t now = lf__sys_now_ns();
	p.polled_ns = now - 5000000;
	ASSERT(!lf__shm_spin_again(&p, now));
	ASSERT(p.polled_ns == now); /* a look would have read the clock again */
}

static void a_poll_again_looks_and_finds_nothing(void)
{
	memset(&phdr, 0, sizeof(phdr));
	uint64_t now = lf__sys_now_ns();
	p.polled_ns = now - 100;
	ASSERT(!lf__shm_spin_again(&p, now));
	ASSERT(p.polled_ns > now); /* it looked, until its clock said so */
}

static void a_poll_again_takes_what_came(void)
{
	memset(&phdr, 0, sizeof(phdr));
	atomic_store(&phdr.tail, 64);
	uint64_t now = lf__sys_now_ns();
	p.polled_ns = now - 100;
	ASSERT(lf__shm_spin_again(&p, now));
}

/* A close that frees a connection while a sweep gives its ring back
 * (shm_mem.c: the sweep takes it off the due list, then punches and wakes
 * its writer) waits for the sweep: the close's lf__shm_mem_forget takes
 * the list's lock even for a connection that looks off the list. Each
 * round in a child: a due ring with pages to punch, a sweep on another
 * thread, and the close's steps (forget, then the page unmapped, as
 * conn_free does) as soon as the sweep took it off the list. A review's
 * probe of the unlocked look: 199 of 200 children died of SIGSEGV. */
static struct lf_shm_conn u;

static void *sweeper(void *arg)
{
	(void)arg;
	lf__shm_mem_sweep();
	return NULL;
}

static void sweep_against_a_close(void)
{
	unsigned char *data = memfd_ring("test-shm-sweep");
	struct lf_ring_hdr *h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!data || h == MAP_FAILED)
		_exit(2);
	pthread_mutex_init(&u.rxl, NULL);
	u.rx = (struct lf_ring){ .h = h, .data = data, .area = LF_RING_SIZE, .pos = 1300000 };
	u.trimmed = 1000000;
	u.emptied = 4; /* 75,000 bytes a read: paced, due */
	u.trim_ns = lf__sys_now_ns();
	for (int i = 0; i < 64; i++)
		data[i * 4096] = 1; /* pages to punch: the madvise takes a while */
	atomic_store(&h->tail, u.rx.pos);
	atomic_store(&h->wbusy, 2);
	atomic_store(&h->want_space, 1);
	lf__shm_mem_idle(&u);
	if (!u.due_prev)
		_exit(2);
	u.trim_ns -= 20000000; /* its time has come */
	pthread_t t;
	if (pthread_create(&t, NULL, sweeper, NULL))
		_exit(2);
	while (__atomic_load_n(&u.due_prev, __ATOMIC_RELAXED))
		;
	lf__shm_mem_forget(&u);
	munmap(h, 4096);
	pthread_join(t, NULL);
	_exit(0);
}

static void a_close_waits_for_a_sweep_of_its_ring(void)
{
	int crashed = 0;
	for (int r = 0; r < 50; r++) {
		pid_t pid = fork();
		ASSERT(pid >= 0);
		if (pid == 0) {
			alarm(10);
			sweep_against_a_close();
		}
		int st;
		ASSERT_EQ(waitpid(pid, &st, 0), pid);
		ASSERT(!WIFEXITED(st) || WEXITSTATUS(st) != 2);
		crashed += !WIFEXITED(st);
	}
	ASSERT_EQ(crashed, 0);
}

static const struct lf_test tests[] = {
	{ "a_close_waits_for_a_sweep_of_its_ring", a_close_waits_for_a_sweep_of_its_ring, 0 },
	{ "a_give_back_wakes_a_writer_that_waits_for_it", a_give_back_wakes_a_writer_that_waits_for_it, 0 },
	{ "a_first_poll_answers_without_looking", a_first_poll_answers_without_looking, 0 },
	{ "a_poll_again_looks_and_finds_nothing", a_poll_again_looks_and_finds_nothing, 0 },
	{ "a_poll_again_takes_what_came", a_poll_again_takes_what_came, 0 },
	{ "small_messages_give_back_at_once", small_messages_give_back_at_once, 0 },
	{ "large_reads_are_paced_then_swept", large_reads_are_paced_then_swept, 0 },
	{ "quiet_right_after_a_look", quiet_right_after_a_look, 0 },
	{ "the_peers_fin_ends_it", the_peers_fin_ends_it, 0 },
	{ "an_edge_registration_ends_it", an_edge_registration_ends_it, 0 },
	{ "a_token_owed_ends_it", a_token_owed_ends_it, 0 },
	{ "a_wait_ends_it", a_wait_ends_it, 0 },
	{ "a_signal_ends_it", a_signal_ends_it, 0 },
	{ "another_thread_is_not_quiet", another_thread_is_not_quiet, 0 },
	{ "time_ends_it", time_ends_it, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
