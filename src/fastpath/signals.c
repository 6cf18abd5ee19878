/* Signals: the application's handlers are wrapped so that loopfast knows
 * when one ran during a spin or another wait of its own, and whether it
 * asked for its system calls to restart (SA_RESTART): such a wait then
 * ends as the blocking call would have (EINTR, or a restart).
 *
 * Every disposition is kept exactly:
 * - SIG_DFL and SIG_IGN go to the kernel as they are, whatever the flags
 *   (Go's runtime and PHP's zend_signal reset a signal to SIG_DFL with
 *   SA_SIGINFO set before they re-raise it: a trampoline would call a NULL
 *   sa_sigaction).
 * - A handler is installed as the trampoline with the application's own
 *   flags and mask (plus SA_SIGINFO): the kernel masks, resets
 *   (SA_RESETHAND), restarts (SA_RESTART) and picks the stack (SA_ONSTACK)
 *   as it would for the handler itself.
 * - What sigaction reads back is the kernel's action with the
 *   application's handler and SA_SIGINFO bit put back, so that flags the C
 *   library adds (SA_RESTORER) and masks the kernel trims read as without
 *   loopfast; after an SA_RESETHAND delivery the kernel keeps the
 *   trampoline's SA_SIGINFO on its SIG_DFL, which is taken off again.
 * - signal(), bsd_signal(), sysv_signal(), sigset() and siginterrupt() are
 *   glibc's own: each calls glibc's internal sigaction, past this wrapper,
 *   and its flags depend on glibc's private state (the set siginterrupt
 *   keeps). So the real function runs, then the kernel's resulting action
 *   is read back; a handler it installed is installed again through the
 *   wrapper with exactly the flags and mask glibc chose, and a trampoline
 *   it returned as the old handler is replaced by the application's. Until
 *   that second install (two system calls later) a signal runs the handler
 *   directly: the handler runs as it should, only a spin does not see it.
 *
 * The counters are per thread: a handler runs on the thread that received
 * the signal, which is the thread whose blocking call the kernel would
 * have interrupted; another thread's spin goes on, as its read would.
 *
 * Caveat: app[] is updated without blocking the signal, so a handler that
 * is being replaced while its signal arrives may run the old or the new
 * one, as with the kernel's own race between two sigaction calls. */
#include "internal.h"
#include "syscalls.h"

#include <errno.h>
#include <string.h>

LF_SIG_TLS atomic_uint lf__sig_seen, lf__sig_interrupt;

static struct sigaction app[_NSIG];
static bool added_siginfo[_NSIG]; /* SA_SIGINFO is the trampoline's, not the application's */

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	struct sigaction *a = &app[sig];

	atomic_fetch_add(&lf__sig_seen, 1);
	if (!(a->sa_flags & SA_RESTART))
		atomic_fetch_add(&lf__sig_interrupt, 1);
	if (a->sa_flags & SA_SIGINFO)
		a->sa_sigaction(sig, si, uc);
	else
		a->sa_handler(sig);
}

static bool is_handler(sighandler_t h)
{
	return h != SIG_DFL && h != SIG_IGN;
}

static bool wrapped(const struct sigaction *k)
{
	return (k->sa_flags & SA_SIGINFO) && k->sa_sigaction == trampoline;
}

/* The kernel's action k as the application would read it without us. */
static void as_set(const struct sigaction *k, const struct sigaction *mine, bool added, struct sigaction *old)
{
	*old = *k;
	if (wrapped(k)) {
		old->sa_sigaction = mine->sa_sigaction;
		old->sa_flags = (k->sa_flags & ~SA_SIGINFO) | (mine->sa_flags & SA_SIGINFO);
	} else if (k->sa_handler == SIG_DFL && (k->sa_flags & SA_RESETHAND) && added) {
		old->sa_flags &= ~SA_SIGINFO;
	}
}

static int set_action(int sig, const struct sigaction *act, struct sigaction *old)
{
	struct sigaction mine, prev, saved;
	int r;

	if (sig <= 0 || sig >= _NSIG)
		return REAL(sigaction)(sig, act, old);
	saved = app[sig];
	bool had_added = added_siginfo[sig];
	if (!lf__spin_used || !act || !is_handler(act->sa_handler)) {
		r = REAL(sigaction)(sig, act, old ? &prev : NULL);
		if (r == 0 && old)
			as_set(&prev, &saved, had_added, old);
		if (r == 0 && act)
			added_siginfo[sig] = false;
		return r;
	}
	app[sig] = *act;
	added_siginfo[sig] = !(act->sa_flags & SA_SIGINFO);
	mine = *act;
	mine.sa_sigaction = trampoline;
	mine.sa_flags |= SA_SIGINFO;
	r = REAL(sigaction)(sig, &mine, &prev);
	if (r < 0) {
		app[sig] = saved;
		added_siginfo[sig] = had_added;
		return r;
	}
	if (old)
		as_set(&prev, &saved, had_added, old);
	return r;
}

LF_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return set_action(sig, act, old);
}

/* The first opt-in of a process not opted in as a whole (a socket option,
 * lf_enable_fast_path, lf_set_spin) comes after its handlers were set:
 * Python's SIGINT handler is installed at start-up. They are wrapped now,
 * so that a wait of loopfast's own on that socket (a bell wait, a spin)
 * ends with EINTR as the blocking call would. Caveats: a handler the
 * application changes at this very moment from another thread may be
 * installed unwrapped, as before this call; another thread's opt-in in the
 * same microseconds does not wait for the wrapping (a wait for it could
 * never end in a child forked meanwhile). */
void lf__signals_wrap(void)
{
	static atomic_bool done;
	struct sigaction k;

	if (lf__spin_used || atomic_exchange(&done, true))
		return; /* whole-process mode wraps every handler as it is set */
	lf__spin_used = true;
	for (int sig = 1; sig < _NSIG; sig++)
		if (REAL(sigaction)(sig, NULL, &k) == 0 && is_handler(k.sa_handler) && !wrapped(&k))
			set_action(sig, &k, NULL);
}

/* After glibc changed sig's action past the wrapper: wraps the handler it
 * installed (the same flags and mask), or keeps app[] in step with the
 * flags siginterrupt rewrote on the trampoline. */
static void resync(int sig)
{
	struct sigaction k;

	if (!lf__spin_used || sig <= 0 || sig >= _NSIG || REAL(sigaction)(sig, NULL, &k) < 0)
		return;
	if (wrapped(&k))
		app[sig].sa_flags = (app[sig].sa_flags & ~SA_RESTART) | (k.sa_flags & SA_RESTART);
	else if (is_handler(k.sa_handler))
		set_action(sig, &k, NULL);
	/* A SIG_DFL or SIG_IGN keeps added_siginfo: glibc's functions never
	 * set SA_SIGINFO, and siginterrupt on a SIG_DFL that SA_RESETHAND left
	 * behind keeps the trampoline's SA_SIGINFO, which must still read as
	 * the application's flags. */
}

/* The old handler glibc returned, as the application installed it. */
static sighandler_t theirs(sighandler_t h, const struct sigaction *before)
{
	struct sigaction t = { .sa_sigaction = trampoline };

	return h == t.sa_handler ? before->sa_handler : h;
}

#define LF_SIGNAL_LIKE(name)                                            \
	LF_EXPORT sighandler_t name(int sig, sighandler_t h)             \
	{                                                                \
		struct sigaction before = app[sig > 0 && sig < _NSIG ? sig : 0]; \
		sighandler_t r = REAL(name)(sig, h);                     \
		int e = errno;                                           \
		if (r == SIG_ERR)                                        \
			return r;                                        \
		resync(sig);                                             \
		errno = e;                                               \
		return theirs(r, &before);                               \
	}
/* glibc declares it only for X/Open before POSIX 2008. */
__sighandler_t bsd_signal(int sig, __sighandler_t handler);
LF_SIGNAL_LIKE(signal)
LF_SIGNAL_LIKE(bsd_signal)
LF_SIGNAL_LIKE(sysv_signal)
LF_SIGNAL_LIKE(__sysv_signal)
LF_SIGNAL_LIKE(sigset)

LF_EXPORT int siginterrupt(int sig, int flag)
{
	int r = REAL(siginterrupt)(sig, flag), e = errno;

	if (r == 0)
		resync(sig);
	errno = e;
	return r;
}
