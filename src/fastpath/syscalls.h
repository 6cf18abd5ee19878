/* The libc functions loopfast interposes, declared once. interpose.c
 * generates the pointers to the next definitions (dlsym RTLD_NEXT) from
 * this table; loopfast.map exports the same names.
 *
 * X(return type, name, (parameters), (arguments)) */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/uio.h>

#define LF_SYSCALLS(X)                                                                                   \
	X(int, socket, (int domain, int type, int proto), (domain, type, proto))                         \
	X(int, connect, (int fd, const struct sockaddr *sa, socklen_t len), (fd, sa, len))               \
	X(int, listen, (int fd, int backlog), (fd, backlog))                                             \
	X(int, accept, (int fd, struct sockaddr *sa, socklen_t *len), (fd, sa, len))                     \
	X(int, accept4, (int fd, struct sockaddr *sa, socklen_t *len, int flags), (fd, sa, len, flags))  \
	X(int, close, (int fd), (fd))                                                                    \
	X(int, getsockname, (int fd, struct sockaddr *sa, socklen_t *len), (fd, sa, len))               \
	X(int, getpeername, (int fd, struct sockaddr *sa, socklen_t *len), (fd, sa, len))               \
	X(int, getsockopt, (int fd, int level, int opt, void *val, socklen_t *len), (fd, level, opt, val, len)) \
	X(int, setsockopt, (int fd, int level, int opt, const void *val, socklen_t len), (fd, level, opt, val, len)) \
	X(int, shutdown, (int fd, int how), (fd, how))                                                   \
	X(int, dup, (int fd), (fd))                                                                      \
	X(int, dup2, (int fd, int nfd), (fd, nfd))                                                       \
	X(int, dup3, (int fd, int nfd, int flags), (fd, nfd, flags))                                     \
	X(int, epoll_create, (int size), (size))                                                         \
	X(int, epoll_create1, (int flags), (flags))                                                      \
	X(int, epoll_ctl, (int epfd, int op, int fd, struct epoll_event *ev), (epfd, op, fd, ev))        \
	X(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n))                                   \
	X(ssize_t, readv, (int fd, const struct iovec *iov, int n), (fd, iov, n))                       \
	X(ssize_t, recv, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags))                  \
	X(ssize_t, recvfrom, (int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *sl), (fd, buf, n, flags, sa, sl)) \
	X(ssize_t, recvmsg, (int fd, struct msghdr *m, int flags), (fd, m, flags))                       \
	X(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n))                             \
	X(ssize_t, writev, (int fd, const struct iovec *iov, int n), (fd, iov, n))                      \
	X(ssize_t, send, (int fd, const void *buf, size_t n, int flags), (fd, buf, n, flags))            \
	X(ssize_t, sendto, (int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t sl), (fd, buf, n, flags, sa, sl)) \
	X(ssize_t, sendmsg, (int fd, const struct msghdr *m, int flags), (fd, m, flags))                 \
	X(int, recvmmsg, (int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *ts), (fd, v, n, flags, ts)) \
	X(int, sendmmsg, (int fd, struct mmsghdr *v, unsigned int n, int flags), (fd, v, n, flags))     \
	X(ssize_t, sendfile, (int out, int in, off_t *off, size_t n), (out, in, off, n))                 \
	X(ssize_t, splice, (int in, loff_t *oin, int out, loff_t *oout, size_t n, unsigned fl), (in, oin, out, oout, n, fl)) \
	X(int, poll, (struct pollfd *fds, nfds_t n, int timeout), (fds, n, timeout))                     \
	X(int, ppoll, (struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask), (fds, n, ts, mask)) \
	X(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv), (n, r, w, e, tv))   \
	X(int, pselect, (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask), (n, r, w, e, ts, mask)) \
	X(int, epoll_wait, (int epfd, struct epoll_event *ev, int max, int timeout), (epfd, ev, max, timeout)) \
	X(int, epoll_pwait, (int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask), (epfd, ev, max, timeout, mask)) \
	X(int, sigaction, (int sig, const struct sigaction *act, struct sigaction *old), (sig, act, old)) \
	X(sighandler_t, signal, (int sig, sighandler_t h), (sig, h))                                     \
	X(sighandler_t, bsd_signal, (int sig, sighandler_t h), (sig, h))                                 \
	X(sighandler_t, sysv_signal, (int sig, sighandler_t h), (sig, h))                                \
	X(sighandler_t, __sysv_signal, (int sig, sighandler_t h), (sig, h))                              \
	X(sighandler_t, sigset, (int sig, sighandler_t h), (sig, h))                                     \
	X(int, siginterrupt, (int sig, int flag), (sig, flag))

#define LF_REAL_EXTERN(ret, name, params, args) extern ret(*lf__real_##name) params;
LF_SYSCALLS(LF_REAL_EXTERN)
extern int (*lf__real_fcntl)(int, int, ...);
extern int (*lf__real_ioctl)(int, unsigned long, ...);
void lf__resolve(void);
/* Each pointer starts at a stub that resolves them all and hands the call
 * on, so that a wrapper calls through it without a test (and can hand
 * its call on as a jump). */
#define REAL(name) (lf__real_##name)
