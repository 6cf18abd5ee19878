/* The libc functions loopfast interposes, declared once. interpose.c
 * generates the pointers to the next definitions (dlsym RTLD_NEXT) from
 * this table; loopfast.map exports the same names.
 *
 * X(return type, name, (parameters), (arguments)) */
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
	X(int, dup, (int fd), (fd))                                                                      \
	X(int, dup2, (int fd, int nfd), (fd, nfd))                                                       \
	X(int, dup3, (int fd, int nfd, int flags), (fd, nfd, flags))                                     \
	X(int, epoll_ctl, (int epfd, int op, int fd, struct epoll_event *ev), (epfd, op, fd, ev))
