/* The spin tier (spin.c): user-space busy polling before a read or wait
 * on a fast-path socket blocks. Above the fd table; called by the data
 * path (io.c, wait.c) and, for the budget's bookkeeping (a socket's mode,
 * its epoll sets), by interpose.c and connect.c. */
#ifndef LF_SPIN_H
#define LF_SPIN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "fdtab.h"

void lf__spin_epoll_member(int epfd, int fd, int op);
/* A fast-path socket with a spin budget. */
static inline bool lf__may_spin(int fd)
{
	struct lf_fd *f = lf__fd_peek(fd);
	return f && f->spin_us && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_FAST);
}
enum { LF_SPIN_DONE, LF_SPIN_BLOCK };
/* Receives without blocking until data, an error, a signal or the end of
 * the budget. LF_SPIN_DONE: *ret (and errno) is the answer. */
int lf__spin_recvmsg(int fd, struct msghdr *m, int flags, ssize_t *ret);
/* The spin of a wait: calls try() (a zero-timeout wait) until it reports
 * something, a signal arrives, the caller's timeout (ns, <0 = none) or the
 * budget ends. Returns LF_SPIN_DONE with *ret set, or LF_SPIN_BLOCK with the
 * remaining timeout in *left_ns. */
struct lf_waiter {
	int (*try)(void *arg);
	void *arg;
};
int lf__spin_wait(struct lf_fd *f, const struct lf_waiter *w, int64_t timeout_ns, int64_t *left_ns, int *ret);

#endif
