/* Signals: the application's handlers are wrapped (sigaction, signal)
 * so that loopfast knows when one ran during a spin or another wait of its
 * own, and whether it asked for its system calls to restart (SA_RESTART):
 * such a wait then ends as the blocking call would have (EINTR, or a
 * restart). The application sees its own handlers, always. */
#include "internal.h"
#include "syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct sigaction app[_NSIG];

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	struct sigaction *a = &app[sig];

	atomic_fetch_add(&lf__sig_seen, 1);
	if (!(a->sa_flags & SA_RESTART))
		atomic_fetch_add(&lf__sig_interrupt, 1);
	if (a->sa_flags & SA_SIGINFO)
		a->sa_sigaction(sig, si, uc);
	else if (a->sa_handler != SIG_IGN && a->sa_handler != SIG_DFL)
		a->sa_handler(sig);
}

static bool wrapped(const struct sigaction *sa)
{
	return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == trampoline;
}

LF_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	struct sigaction mine, prev;
	int r;

	/* SIG_DFL and SIG_IGN go to the kernel as they are, whatever the
	 * flags: with SA_SIGINFO set (Go's runtime and PHP's zend_signal reset
	 * a signal that way before they re-raise it) sa_sigaction is NULL or
	 * 1, and a trampoline would call it. */
	if (sig <= 0 || sig >= _NSIG || !lf__spin_used ||
	    (act && (act->sa_handler == SIG_IGN || act->sa_handler == SIG_DFL))) {
		r = REAL(sigaction)(sig, act, old ? &prev : NULL);
		if (r == 0 && old)
			*old = wrapped(&prev) ? app[sig] : prev;
		return r;
	}
	if (act) {
		struct sigaction saved = app[sig];
		app[sig] = *act;
		mine = *act;
		mine.sa_sigaction = trampoline;
		mine.sa_flags |= SA_SIGINFO;
		r = REAL(sigaction)(sig, &mine, &prev);
		if (r < 0) {
			app[sig] = saved;
			return r;
		}
		if (old)
			*old = wrapped(&prev) ? saved : prev;
		return r;
	}
	r = REAL(sigaction)(sig, NULL, &prev);
	if (r == 0 && old)
		*old = wrapped(&prev) ? app[sig] : prev;
	return r;
}

/* glibc's signal() has BSD semantics (SA_RESTART) and calls sigaction
 * internally, past our wrapper: route it through ours. */
LF_EXPORT sighandler_t signal(int sig, sighandler_t h)
{
	struct sigaction act = { .sa_handler = h, .sa_flags = SA_RESTART }, old;

	if (!lf__spin_used)
		return REAL(signal)(sig, h);
	sigemptyset(&act.sa_mask);
	sigaddset(&act.sa_mask, sig);
	if (sigaction(sig, &act, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}
