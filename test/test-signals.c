/* The signal wrapper keeps every disposition as the C library sets it.
 *
 * Each case runs twice, in two forked children: one with the wrapper active
 * (a fast-path pair with a spin budget: lf__spin_used, and its read spins)
 * and one without (a plain TCP pair, the C library's own functions, the
 * kernel's blocking read). Each child installs a prior handler, sets the
 * case's disposition through sigaction, signal, bsd_signal, sysv_signal,
 * __sysv_signal or sigset, with or without siginterrupt before or after,
 * then: reads the action back, has another thread signal it during a
 * blocking read of its socket, reads the action back again (SA_RESETHAND;
 * and after one more siginterrupt where the case has one), and signals
 * itself once more. The two children's reports (old action,
 * read-backs, the read's result, the handler's calls, arguments, mask and
 * stack) and their exit statuses must be equal. The kernel's own action is
 * checked too (raw rt_sigaction): the first child's handler really is
 * behind loopfast's trampoline, the second's is not.
 *
 * A signal sent before the read began (a loaded machine) ends no read: a
 * case whose two runs differ is run again, twice at most; a real
 * difference shows every time.
 *
 * The last tests: a handler without SA_RESTART that runs on another thread
 * does not end this thread's spinning read (over TCP it would not end its
 * blocking read), and one that runs on this thread does (EINTR). */
#include "kernel.h"
#include "runner.h"
#include "loopfast.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

extern sighandler_t bsd_signal(int sig, sighandler_t h); /* X/Open only in <signal.h> */

#define SIG SIGUSR1
#define BIG_SPIN 20000000 /* 20 s: the read spins for as long as the case lasts */

enum { S_SIGACTION, S_SIGNAL, S_BSD, S_SYSV, S_SYSV2, S_SIGSET, S_N };
static const char *setter_name[] = { "sigaction", "signal", "bsd_signal", "sysv_signal", "__sysv_signal", "sigset" };
enum { D_HANDLER, D_DFL, D_IGN, D_HOLD };
static const char *disp_name[] = { "handler", "SIG_DFL", "SIG_IGN", "SIG_HOLD" };
/* siginterrupt: not called; (SIG, 1) before the setter; (SIG, 1) after;
 * (SIG, 0) after; (SIG, 1) before and (SIG, 0) after. */
enum { I_NONE, I_BEFORE, I_AFTER_ON, I_AFTER_OFF, I_BEFORE_AFTER_OFF, I_N };
static const char *intr_name[] = { "", " siginterrupt(1) before", " siginterrupt(1) after",
				   " siginterrupt(0) after", " siginterrupt(1) before, (0) after" };
static const int flag_bits[] = { SA_SIGINFO, SA_RESTART, SA_RESETHAND, SA_NODEFER, SA_ONSTACK };
static const char *flag_name[] = { "SIGINFO", "RESTART", "RESETHAND", "NODEFER", "ONSTACK" };

struct kase {
	int setter, disp, flags, intr;
};

struct action {
	uintptr_t h;
	long flags;
	uint64_t mask; /* signals 1..64 */
};

/* What a child saw; stage says how far it got before it exited or died. */
struct report {
	int stage;
	struct action old;  /* the setter's old action (signal-like: the handler only) */
	struct action back; /* sigaction(SIG, NULL, &back) after the setter */
	int read_r, read_errno;
	int calls, signo, si_ok, self_blocked, usr2_blocked, on_altstack;
	struct action back2; /* after the first delivery */
	struct action back3; /* after siginterrupt(SIG, 1) then (cases with siginterrupt) */
	int calls2;
	int wrapped; /* the kernel holds loopfast's trampoline: not compared */
};

static volatile sig_atomic_t calls, signo, si_ok, self_blocked, usr2_blocked, on_altstack;
static char altstack[1 << 16];

static void note(int sig)
{
	sigset_t m;
	char here;

	if (calls++)
		return;
	signo = sig;
	sigprocmask(SIG_SETMASK, NULL, &m);
	self_blocked = sigismember(&m, SIG);
	usr2_blocked = sigismember(&m, SIGUSR2);
	on_altstack = &here >= altstack && &here < altstack + sizeof(altstack);
}

static void h_plain(int sig)
{
	note(sig);
}

static void h_info(int sig, siginfo_t *si, void *uc)
{
	if (!calls)
		si_ok = si && uc && si->si_signo == SIG && si->si_code == SI_TKILL && si->si_pid == getpid();
	note(sig);
}

static void h_prior(int sig)
{
	(void)sig;
}

static uint64_t bits(const sigset_t *s)
{
	uint64_t b = 0;

	for (int i = 1; i <= 64; i++)
		if (sigismember(s, i) == 1)
			b |= 1ull << (i - 1);
	return b;
}

static struct action action_of(const struct sigaction *a)
{
	return (struct action){ (uintptr_t)a->sa_handler, a->sa_flags, bits(&a->sa_mask) };
}

static struct action read_back(void)
{
	struct sigaction a;

	ASSERT_EQ(sigaction(SIG, NULL, &a), 0);
	return action_of(&a);
}

/* The kernel's own handler for SIG (loopfast interposes sigaction). */
static bool kernel_wrapped(void)
{
	struct { void *h; unsigned long flags; void *restorer; uint64_t mask; } k;

	ASSERT_EQ(syscall(SYS_rt_sigaction, SIG, NULL, &k, 8), 0);
	return k.h != (void *)h_plain && k.h != (void *)h_info && k.h != (void *)SIG_DFL &&
	       k.h != (void *)SIG_IGN;
}

/* A connected pair: fast path with a spin budget (the wrapper is active
 * from here on), or plain TCP without loopfast's calls. */
static void pair(bool lf, int *c, int *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	ASSERT_EQ(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	ASSERT_EQ(listen(lfd, 4), 0);
	if (lf)
		ASSERT_EQ(lf_enable_fast_path(lfd), 0);
	ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&a, &l), 0);
	*c = socket(AF_INET, SOCK_STREAM, 0);
	if (lf)
		ASSERT_EQ(lf_enable_fast_path(*c), 0);
	ASSERT_EQ(connect(*c, (struct sockaddr *)&a, sizeof(a)), 0);
	*s = accept(lfd, NULL, NULL);
	ASSERT_GE(*s, 0);
	ASSERT_EQ(k_path(*c, *s), lf ? K_FAST : K_TCP);
	/* A round trip: the connection is confirmed (a read then spins
	 * rather than waiting for the server's claim on the bell). */
	char b;
	ASSERT_EQ(write(*s, "a", 1), 1);
	ASSERT_EQ(read(*c, &b, 1), 1);
	ASSERT_EQ(write(*c, "b", 1), 1);
	ASSERT_EQ(read(*s, &b, 1), 1);
	if (lf)
		ASSERT_EQ(lf_set_spin(*c, BIG_SPIN), 0);
	close(lfd);
}

/* The reader: its kernel thread id, and whether it is inside its read. */
static atomic_int reader_tid, in_read;

static void reading(bool on)
{
	atomic_store(&reader_tid, (int)gettid());
	atomic_store(&in_read, on);
}

/* Whether the reader is asleep in the kernel (state S), not spinning. */
static bool asleep(void)
{
	char path[64], buf[256];
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", atomic_load(&reader_tid));
	if ((fd = open(path, O_RDONLY)) < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	const char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'S';
}

/* Waits until the reader (thread t) has seen the signal's handler: it has
 * left its read, or is asleep in the kernel (a restarted read, or one the
 * kernel blocks in; not when `sleeps` is false), or has spun for 20 ms of
 * CPU time more (a spin that ran that long after the handler has seen
 * it, however long the machine kept it off a CPU). */
static void let_spin_or_sleep(pthread_t t, bool sleeps)
{
	clockid_t cl;
	struct timespec t0, t1;

	if (pthread_getcpuclockid(t, &cl) || clock_gettime(cl, &t0))
		return; /* the thread has ended */
	for (unsigned ms = 0; ms < 10000 && atomic_load(&in_read) && !(sleeps && asleep()); ms++) {
		usleep(1000);
		if (clock_gettime(cl, &t1) == 0 &&
		    (t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec) > 20000000)
			return;
	}
}

static void let_spin(pthread_t t)
{
	let_spin_or_sleep(t, true);
}

struct killer {
	pthread_t target;
	int fd;
	bool wait_handler;
};

/* Signals the target once it is in its read (20 ms into it), then, once
 * the read has seen the handler (when there is one), writes a byte. */
static void *killer(void *arg)
{
	struct killer *k = arg;

	while (!atomic_load(&in_read))
		usleep(1000);
	usleep(20000);
	ASSERT_EQ(pthread_kill(k->target, SIG), 0);
	for (int i = 0; k->wait_handler && i < 10000 && !calls; i++)
		usleep(1000);
	let_spin(k->target);
	ASSERT_EQ(write(k->fd, "x", 1), 1);
	return NULL;
}

static sighandler_t disposition(int disp)
{
	static const sighandler_t h[] = { h_plain, SIG_DFL, SIG_IGN, SIG_HOLD };
	return h[disp];
}

static void set(const struct kase *k, struct report *r)
{
	static sighandler_t (*const fn[])(int, sighandler_t) = { NULL, signal, bsd_signal, sysv_signal,
								  __sysv_signal, sigset };

	if (k->setter == S_SIGACTION) {
		struct sigaction a = { .sa_flags = k->flags }, old;
		if (k->disp == D_HANDLER && (k->flags & SA_SIGINFO))
			a.sa_sigaction = h_info;
		else
			a.sa_handler = disposition(k->disp);
		sigemptyset(&a.sa_mask);
		sigaddset(&a.sa_mask, SIGUSR2);
		ASSERT_EQ(sigaction(SIG, &a, &old), 0);
		r->old = action_of(&old);
	} else {
		sighandler_t old = fn[k->setter](SIG, disposition(k->disp));
		ASSERT(old != SIG_ERR);
		r->old.h = (uintptr_t)old;
	}
}

static void say(int out, struct report *r, int stage)
{
	r->stage = stage;
	ASSERT_EQ(write(out, r, sizeof(*r)), (ssize_t)sizeof(*r));
}

/* One run of a case, in a child; writes its report to out as it goes. */
static void child(const struct kase *k, bool lf, int out)
{
	struct report r;
	struct sigaction prior = { .sa_handler = h_prior };
	stack_t ss = { .ss_sp = altstack, .ss_size = sizeof(altstack) };
	int c, s;
	char b;

	memset(&r, 0, sizeof(r)); /* padding too: reports are compared whole */
	pair(lf, &c, &s);
	ASSERT_EQ(sigaltstack(&ss, NULL), 0);
	sigemptyset(&prior.sa_mask);
	ASSERT_EQ(sigaction(SIG, &prior, NULL), 0);
	if (k->intr == I_BEFORE || k->intr == I_BEFORE_AFTER_OFF)
		ASSERT_EQ(siginterrupt(SIG, 1), 0);
	set(k, &r);
	if (k->intr == I_AFTER_ON)
		ASSERT_EQ(siginterrupt(SIG, 1), 0);
	if (k->intr == I_AFTER_OFF || k->intr == I_BEFORE_AFTER_OFF)
		ASSERT_EQ(siginterrupt(SIG, 0), 0);
	r.back = read_back();
	r.wrapped = kernel_wrapped();
	say(out, &r, 1);

	struct killer kl = { pthread_self(), s, k->disp == D_HANDLER };
	pthread_t t;
	ASSERT_EQ(pthread_create(&t, NULL, killer, &kl), 0);
	reading(true);
	r.read_r = (int)read(c, &b, 1);
	r.read_errno = r.read_r < 0 ? errno : 0;
	reading(false);
	ASSERT_EQ(pthread_join(t, NULL), 0);
	r.calls = calls, r.signo = signo, r.si_ok = si_ok;
	r.self_blocked = self_blocked, r.usr2_blocked = usr2_blocked, r.on_altstack = on_altstack;
	r.back2 = read_back();
	if (k->intr != I_NONE) { /* glibc rewrites what SA_RESETHAND left, say */
		ASSERT_EQ(siginterrupt(SIG, 1), 0);
		r.back3 = read_back();
	}
	say(out, &r, 2);

	ASSERT_EQ(pthread_kill(pthread_self(), SIG), 0);
	r.calls2 = calls;
	say(out, &r, 3);
	exit(0);
}

/* Runs one child; returns its last report and its wait status. */
static struct report run(const struct kase *k, bool lf, int *status)
{
	struct report r, got;
	int p[2];

	memset(&r, 0, sizeof(r));
	ASSERT_EQ(pipe(p), 0);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		close(p[0]);
		child(k, lf, p[1]);
	}
	close(p[1]);
	while (read(p[0], &got, sizeof(got)) == (ssize_t)sizeof(got))
		r = got;
	close(p[0]);
	ASSERT_EQ(waitpid(pid, status, 0), pid);
	return r;
}

static void describe(const struct kase *k, char *buf, size_t n)
{
	int o = snprintf(buf, n, "%s(%s", setter_name[k->setter], disp_name[k->disp]);
	for (unsigned i = 0; i < sizeof(flag_bits) / sizeof(flag_bits[0]); i++)
		if (k->flags & flag_bits[i])
			o += snprintf(buf + o, n - o, "|%s", flag_name[i]);
	snprintf(buf + o, n - o, ")%s", intr_name[k->intr]);
}

static void print_report(const char *who, const struct report *r, int st)
{
	fprintf(stderr,
		"  %s: status %#x stage %d old h=%#lx fl=%#lx m=%#llx back h=%#lx fl=%#lx m=%#llx read %d errno %d "
		"calls %d signo %d si_ok %d blocked self %d usr2 %d altstack %d back2 h=%#lx fl=%#lx m=%#llx "
		"back3 h=%#lx fl=%#lx m=%#llx calls2 %d\n",
		who, st, r->stage, (unsigned long)r->old.h, r->old.flags, (unsigned long long)r->old.mask,
		(unsigned long)r->back.h, r->back.flags, (unsigned long long)r->back.mask, r->read_r, r->read_errno,
		r->calls, r->signo, r->si_ok, r->self_blocked, r->usr2_blocked, r->on_altstack,
		(unsigned long)r->back2.h, r->back2.flags, (unsigned long long)r->back2.mask,
		(unsigned long)r->back3.h, r->back3.flags, (unsigned long long)r->back3.mask, r->calls2);
}

/* Runs the case with and without the wrapper; fails when they differ. */
static void check(const struct kase *k)
{
	char name[160];

	describe(k, name, sizeof(name));
	for (int attempt = 1;; attempt++) {
		int st_lf, st_ref;
		struct report lf = run(k, true, &st_lf), ref = run(k, false, &st_ref);
		if (lf.stage < 1 || ref.stage < 1) {
			fprintf(stderr, "%s: a child failed before setting the disposition\n", name);
			print_report("loopfast", &lf, st_lf);
			print_report("plain", &ref, st_ref);
			ASSERT(0);
		}
		if (k->disp == D_HANDLER) {
			ASSERT_EQ(lf.wrapped, 1); /* the case tested the wrapper */
			ASSERT_EQ(ref.wrapped, 0);
		}
		lf.wrapped = ref.wrapped = 0;
		if (st_lf == st_ref && !memcmp(&lf, &ref, sizeof(lf)))
			return;
		fprintf(stderr, "%s differs (attempt %d):\n", name, attempt);
		print_report("loopfast", &lf, st_lf);
		print_report("plain", &ref, st_ref);
		ASSERT_LT(attempt, 3);
	}
}

/* siginterrupt before sigaction changes nothing sigaction sets. */
static const int sa_intr[] = { I_NONE, I_AFTER_ON, I_AFTER_OFF };

static void sigaction_dispositions(void)
{
	int n = 0;

	setenv("LOOPFAST_SPIN_BACKOFF", "0", 1);
	for (int d = D_HANDLER; d <= D_IGN; d++)
		for (int f = 0; f < 32; f++)
			for (int i = 0; i < 3; i++) {
				struct kase k = { S_SIGACTION, d, 0, sa_intr[i] };
				for (int b = 0; b < 5; b++)
					if (f & (1 << b))
						k.flags |= flag_bits[b];
				check(&k);
				n++;
			}
	ASSERT_EQ(n, 96 * 3);
	printf("  %d cases the same with and without the wrapper\n", n);
}

/* signal, bsd_signal, sysv_signal, __sysv_signal and sigset take no flags:
 * theirs come from glibc, and from siginterrupt. */
static void signal_like_dispositions(void)
{
	int n = 0;

	setenv("LOOPFAST_SPIN_BACKOFF", "0", 1);
	for (int s = S_SIGNAL; s < S_N; s++)
		for (int d = D_HANDLER; d <= (s == S_SIGSET ? D_HOLD : D_IGN); d++)
			for (int i = I_NONE; i < I_N; i++) {
				check(&(struct kase){ s, d, 0, i });
				n++;
			}
	ASSERT_EQ(n, 4 * 3 * I_N + 4 * I_N);
	printf("  %d cases the same with and without the wrapper\n", n);
}

/* ---- a handler interrupts the calls of the thread it runs on only */

static atomic_int handled;

static void on_usr1(int sig)
{
	(void)sig;
	atomic_fetch_add(&handled, 1);
}

struct reader {
	int fd;
	ssize_t r;
	int err;
	pthread_t self;
};

static void *reader(void *arg)
{
	struct reader *rd = arg;
	char b;

	reading(true);
	rd->r = read(rd->fd, &b, 1);
	rd->err = rd->r < 0 ? errno : 0;
	reading(false);
	return NULL;
}

/* Thread A reads (spinning on the fast path, blocked in the kernel over
 * TCP); the signal, handled without SA_RESTART, goes to this thread (B)
 * or to A. Returns A's read: 1 (the byte written after the handler ran)
 * or -1 with EINTR. */
static ssize_t read_while_signalled(bool lf, bool to_reader, int *err)
{
	struct sigaction sa = { .sa_handler = on_usr1 };
	struct reader rd;
	pthread_t t;
	int c, s;

	setenv("LOOPFAST_SPIN_BACKOFF", "0", 1);
	pair(lf, &c, &s);
	sigemptyset(&sa.sa_mask);
	ASSERT_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
	atomic_store(&handled, 0);
	rd = (struct reader){ c, 0, 0 };
	ASSERT_EQ(pthread_create(&t, NULL, reader, &rd), 0);
	while (!atomic_load(&in_read))
		usleep(1000);
	usleep(50000); /* A is in its read (its spin lasts 20 s) */
	/* ... and spinning there (20 ms of its CPU time since), or, over
	 * TCP, asleep in the kernel: a signal handled before its spin began
	 * is one its spin never sees, and would hide a thread that sees
	 * another's (a mutant, sig-counter-process-wide, survived busy runs
	 * so; the fast path's reader never sleeps in its spin, so a moment
	 * asleep before it, on a lock, no longer counts as its wait) */
	let_spin_or_sleep(t, !lf);
	ASSERT_EQ(pthread_kill(to_reader ? t : pthread_self(), SIGUSR1), 0);
	for (int i = 0; i < 10000 && !atomic_load(&handled); i++)
		usleep(1000);
	ASSERT_EQ(atomic_load(&handled), 1);
	let_spin(t);
	ASSERT_EQ(write(s, "x", 1), 1);
	ASSERT_EQ(pthread_join(t, NULL), 0);
	close(c);
	close(s);
	*err = rd.err;
	return rd.r;
}

static void handler_on_another_thread_does_not_interrupt(void)
{
	for (int lf = 0; lf <= 1; lf++) {
		int err;
		ssize_t r = read_while_signalled(lf, false, &err);
		if (r != 1)
			fprintf(stderr, "  %s: the read returned %zd (errno %d)\n", lf ? "fast path" : "tcp", r, err);
		ASSERT_EQ(r, 1);
	}
}

static void handler_on_the_reading_thread_interrupts(void)
{
	for (int lf = 0; lf <= 1; lf++) {
		int err;
		ssize_t r = read_while_signalled(lf, true, &err);
		if (r != -1)
			fprintf(stderr, "  %s: the read returned %zd\n", lf ? "fast path" : "tcp", r);
		ASSERT_EQ(r, -1);
		ASSERT_EQ(err, EINTR);
	}
}

static const struct lf_test tests[] = {
	{ "sigaction_dispositions", sigaction_dispositions, 600 },
	{ "signal_like_dispositions", signal_like_dispositions, 300 },
	{ "handler_on_another_thread_does_not_interrupt", handler_on_another_thread_does_not_interrupt, 0 },
	{ "handler_on_the_reading_thread_interrupts", handler_on_the_reading_thread_interrupts, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
