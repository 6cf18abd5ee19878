/* The fd table alone (fdtab.c and the raw-call layer, no other fast-path
 * file: a call upward would not link): what an entry's reset calls of the
 * layers above and in what order, what a dup carries, and the hidden
 * descriptors' numbering. */
#include "runner.h"
#include "fdtab.h"
#include "sys.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

/* What the registered hooks saw: which ran, on which fd, in what order,
 * and the entry's flags at the time. */
static struct {
	char order[8];
	int n, fd;
	unsigned flags_at_drop;
	struct lf_listener *put;
	unsigned flags_at_put;
	bool lst_at_put;
} seen;

static void drop_pending(int fd)
{
	seen.order[seen.n++] = 'p';
	seen.fd = fd;
	seen.flags_at_drop = atomic_load(&lf__fd(fd)->flags);
}

static void drop_bell(int fd)
{
	seen.order[seen.n++] = 'b';
	seen.fd = fd;
	seen.flags_at_drop = atomic_load(&lf__fd(fd)->flags);
}

/* The table knows a listener only by its address: the test's own stands
 * in for listener.c's, a count of references. */
struct lf_listener {
	atomic_int refs;
};

static void get(struct lf_listener *l)
{
	atomic_fetch_add(&l->refs, 1);
}

static int put_fd;
static void put(struct lf_listener *l)
{
	seen.order[seen.n++] = 'l';
	seen.put = l;
	seen.flags_at_put = atomic_load(&lf__fd(put_fd)->flags);
	seen.lst_at_put = lf__fd(put_fd)->lst != NULL;
	atomic_fetch_sub(&l->refs, 1);
}

static void register_hooks(void)
{
	lf__fd_on_drop(LF_F_UNCONFIRMED, drop_bell); /* registered out of order on purpose */
	lf__fd_on_drop(LF_F_PENDING, drop_pending);
	lf__fd_on_listener(get, put);
}

static void range(void)
{
	ASSERT(lf__fd(-1) == NULL);
	ASSERT(lf__fd(LF_FD_MAX) == NULL);
	ASSERT(lf__fd(0) != NULL);
	ASSERT(lf__fd(LF_FD_MAX - 1) != NULL);
	ASSERT(lf__fd(7) == lf__fd(7));
	ASSERT(lf__fd(8) == lf__fd(7) + 1);
}

static void reset_without_hooks_clears(void)
{
	struct lf_fd *f = lf__fd(5);

	atomic_store(&f->flags, LF_F_FAST | LF_F_PENDING | LF_F_UNCONFIRMED);
	f->optset = 3;
	f->spin_us = 9;
	f->pend_err = 104;
	lf__fd_reset(5);
	ASSERT_EQ(atomic_load(&f->flags), 0);
	ASSERT_EQ(f->optset, 0);
	ASSERT_EQ(f->spin_us, 0);
	ASSERT_EQ(f->pend_err, 0);
	ASSERT_EQ(seen.n, 0);
}

static void reset_calls_the_hooks_in_order(void)
{
	struct lf_listener l = { .refs = 1 };
	struct lf_fd *f = lf__fd(6);

	register_hooks();
	put_fd = 6;
	atomic_store(&f->flags, LF_F_FAST | LF_F_PENDING | LF_F_UNCONFIRMED);
	f->lst = &l;
	f->optset = 5;
	f->ep[0].epfd1 = 4;
	lf__fd_reset(6);
	ASSERT_EQ(seen.n, 3);
	ASSERT_EQ(seen.order[0], 'p'); /* the pending connect, then the bell, then the listener */
	ASSERT_EQ(seen.order[1], 'b');
	ASSERT_EQ(seen.order[2], 'l');
	ASSERT_EQ(seen.fd, 6);
	ASSERT(seen.flags_at_drop & LF_F_UNCONFIRMED); /* the state is still there when its hook runs */
	ASSERT(seen.put == &l);
	ASSERT_EQ(seen.flags_at_put, 0); /* the listener goes last, from a clean entry */
	ASSERT(!seen.lst_at_put);
	ASSERT_EQ(atomic_load(&l.refs), 0);
	ASSERT_EQ(atomic_load(&f->flags), 0);
	ASSERT_EQ(f->optset, 0);
	ASSERT_EQ(f->ep[0].epfd1, 0);
}

static void reset_calls_only_what_is_held(void)
{
	struct lf_fd *f = lf__fd(9);

	register_hooks();
	atomic_store(&f->flags, LF_F_FAST | LF_F_UNCONFIRMED);
	lf__fd_reset(9);
	ASSERT_EQ(seen.n, 1);
	ASSERT_EQ(seen.order[0], 'b');
	atomic_store(&f->flags, LF_F_FAST);
	lf__fd_reset(9);
	lf__fd_reset(10); /* never used */
	ASSERT_EQ(seen.n, 1);
}

static void copy_carries_options_not_state(void)
{
	struct lf_listener l = { .refs = 1 };
	struct lf_fd *a = lf__fd(11), *b = lf__fd(12);

	register_hooks();
	put_fd = 12;
	a->family = AF_INET6;
	a->spin_us = 50;
	memset(a->opt, 0x5a, 16);
	a->optset = 16;
	a->sockset = lf__carried_bit(SO_RCVBUF);
	a->lst = &l;
	atomic_store(&a->flags, LF_F_FAST | LF_F_HIDDEN | LF_F_PENDING | LF_F_UNCONFIRMED | LF_F_NONBLOCK);
	atomic_store(&b->flags, LF_F_PENDING); /* what "to" held is dropped first */
	lf__fd_copy(11, 12);
	ASSERT_EQ(seen.n, 1);
	ASSERT_EQ(seen.order[0], 'p');
	ASSERT_EQ(seen.fd, 12);
	ASSERT_EQ(atomic_load(&b->flags), LF_F_FAST | LF_F_NONBLOCK);
	ASSERT_EQ(b->family, AF_INET6);
	ASSERT_EQ(b->spin_us, 50);
	ASSERT_EQ(b->optset, 16);
	ASSERT_EQ(memcmp(a->opt, b->opt, sizeof(a->opt)), 0);
	ASSERT_EQ(b->sockset, a->sockset);
	ASSERT(b->lst == &l);
	ASSERT_EQ(atomic_load(&l.refs), 2);
	lf__fd_reset(12); /* each copy drops its own reference */
	ASSERT(seen.put == &l);
	ASSERT_EQ(atomic_load(&l.refs), 1);
	ASSERT_EQ(atomic_load(&a->flags) & LF_F_PENDING, LF_F_PENDING); /* the original is untouched */
}

static void carried_bits(void)
{
	ASSERT_EQ(lf__carried_bit(SO_RCVTIMEO), 1);
	ASSERT_EQ(lf__carried_bit(SO_SNDBUF), 1u << (lf__ncarried - 1));
	ASSERT_EQ(lf__carried_bit(SO_TYPE), 0);
}

static long hide_base(void)
{
	struct rlimit rl;
	long base = 512;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		base = (long)rl.rlim_cur / 2;
	return base > LF_FD_MAX - 1024 ? LF_FD_MAX - 1024 : base;
}

static void hidden_descriptors(void)
{
	int home = -1, fd = lf__sys_socket(AF_UNIX, SOCK_STREAM, 0);

	ASSERT_GE(fd, 0);
	ASSERT_LT(fd, hide_base());
	int h = lf__fd_hide(fd, &home);
	ASSERT_EQ(home, h);
	ASSERT_GE(h, hide_base()); /* out of the application's numbering */
	ASSERT_EQ(fcntl(fd, F_GETFD), -1); /* the low number is free again */
	ASSERT_EQ(fcntl(h, F_GETFD), FD_CLOEXEC);
	ASSERT_EQ(atomic_load(&lf__fd(h)->flags), LF_F_HIDDEN);
	ASSERT(lf__fd(h)->home == &home);

	/* The application takes the number: the descriptor moves, its home follows. */
	lf__fd_relocate(h);
	ASSERT_NE(home, h);
	ASSERT_GE(home, hide_base());
	ASSERT_EQ(fcntl(h, F_GETFD), -1);
	ASSERT_EQ(atomic_load(&lf__fd(h)->flags), 0);
	ASSERT_EQ(atomic_load(&lf__fd(home)->flags), LF_F_HIDDEN);

	int d = lf__fd_dup_hidden(home);
	ASSERT_GE(d, hide_base());
	ASSERT_EQ(fcntl(d, F_GETFD), FD_CLOEXEC);
	ASSERT_EQ(atomic_load(&lf__fd(d)->flags), 0); /* a dup is not marked */

	lf__fd_unhide(home);
	ASSERT_EQ(atomic_load(&lf__fd(home)->flags), 0);
	ASSERT(lf__fd(home)->home == NULL);
}

static const struct lf_test tests[] = {
	{ "range", range, 0 },
	{ "reset_without_hooks_clears", reset_without_hooks_clears, 0 },
	{ "reset_calls_the_hooks_in_order", reset_calls_the_hooks_in_order, 0 },
	{ "reset_calls_only_what_is_held", reset_calls_only_what_is_held, 0 },
	{ "copy_carries_options_not_state", copy_carries_options_not_state, 0 },
	{ "carried_bits", carried_bits, 0 },
	{ "hidden_descriptors", hidden_descriptors, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
