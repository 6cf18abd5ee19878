/* Internal interfaces of libloopfast. Non-static internal symbols carry the
 * lf__ prefix; nothing here is exported (see loopfast.map). */
#ifndef LF_INTERNAL_H
#define LF_INTERNAL_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>

#define LF_EXPORT __attribute__((visibility("default")))

/* ---- addrmap.c: loopback addresses and the abstract names that encode them */

/* A TCP endpoint, always kept in its own family (v4-mapped v6 addresses are
 * turned into plain v4 by lf__ep_from_sockaddr). */
struct lf_ep {
	int family; /* AF_INET or AF_INET6 */
	union {
		struct in_addr v4;
		struct in6_addr v6;
	} addr;
	uint16_t port; /* host order */
};

#define LF_NAME_PREFIX "loopfast/"
#define LF_NAME_MAX 108

bool lf__ep_from_sockaddr(struct lf_ep *ep, const struct sockaddr *sa, socklen_t len);
/* Writes ep as a sockaddr of the given family (v4 in v6 as v4-mapped). */
socklen_t lf__ep_to_sockaddr(const struct lf_ep *ep, int family, struct sockaddr_storage *ss);
bool lf__ep_is_loopback(const struct lf_ep *ep);
bool lf__ep_is_any(const struct lf_ep *ep);
bool lf__ep_equal(const struct lf_ep *a, const struct lf_ep *b);
int lf__ep_format(const struct lf_ep *ep, char *buf, size_t len); /* "127.0.0.1:80", "[::1]:80" */

/* Rendezvous of a listener: "\0loopfast/L/<fam>/<addr>/<port>".
 * Client end of a connection:
 * "\0loopfast/C/<fam>/<caddr>/<cport>/<saddr>/<sport>/<nonce>", where fam is
 * the family of the client's TCP socket and the nonce (the TCP socket's
 * inode) keeps the name unique when the kernel reuses the ephemeral port of
 * a connection whose doorbell is gone. Both return the sockaddr length. */
socklen_t lf__name_listener(struct sockaddr_un *sun, int family, const struct lf_ep *ep);
socklen_t lf__name_client(struct sockaddr_un *sun, int family, const struct lf_ep *c,
			  const struct lf_ep *s, unsigned long nonce);
/* The stash of a listener: "\0loopfast/S/<fam>/<addr>/<port>". */
socklen_t lf__name_stash(struct sockaddr_un *sun, int family, const struct lf_ep *ep);
enum lf_name_kind { LF_NAME_NONE, LF_NAME_LISTENER, LF_NAME_CLIENT };
/* Parses an abstract name; for a listener fills *a, for a client fills the
 * client endpoint in *a and the server endpoint in *b; *family gets the
 * family encoded in the name. */
enum lf_name_kind lf__name_parse(const struct sockaddr_un *sun, socklen_t len, int *family,
				 struct lf_ep *a, struct lf_ep *b);

/* ---- diag.c: sock_diag queries (unprivileged) */

struct lf_diag_listener {
	int family;        /* of the socket */
	struct lf_ep ep;   /* its address (v4-mapped turned into v4) */
	uint32_t uid;
	uint32_t inode;
	bool v6only;
};

/* Lists TCP listening sockets of one family on port (host order).
 * Returns how many were written (at most max) or -errno. */
int lf__diag_listeners(int family, uint16_t port, struct lf_diag_listener *out, int max);

/* ---- sys: raw system calls that bypass any interposer (ours included) */

int lf__sys_close(int fd);
int lf__sys_socket(int domain, int type, int proto);
int lf__sys_listen(int fd, int backlog);
int lf__sys_connect(int fd, const struct sockaddr *sa, socklen_t len);
int lf__sys_bind(int fd, const struct sockaddr *sa, socklen_t len);
int lf__sys_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags);
int lf__sys_dup3(int oldfd, int newfd, int flags);
int lf__sys_fcntl(int fd, int cmd, long arg);
int lf__sys_getsockname(int fd, struct sockaddr *sa, socklen_t *len);
int lf__sys_getpeername(int fd, struct sockaddr *sa, socklen_t *len);
int lf__sys_getsockopt(int fd, int level, int opt, void *val, socklen_t *len);
int lf__sys_setsockopt(int fd, int level, int opt, const void *val, socklen_t len);
int lf__sys_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
ssize_t lf__sys_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *sa, socklen_t sl);
ssize_t lf__sys_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *sa, socklen_t *sl);

/* ---- fdtab.c: per-fd state, an array indexed by fd */

#define LF_FD_MAX 65536

enum {
	LF_F_OPTIN = 1u << 0,     /* opted in, not yet connected or listening */
	LF_F_FAST = 1u << 1,      /* a fast-path connection (Unix stream) */
	LF_F_HIDDEN = 1u << 2,    /* one of loopfast's own descriptors */
	LF_F_NOFAST = 1u << 3,    /* listener that cannot serve the fast path */
	LF_F_INPROGRESS = 1u << 4, /* fast path reported EINPROGRESS to connect */
	LF_F_NONBLOCK = 1u << 5,  /* fast-path socket in non-blocking mode */
	LF_F_RCVTIMEO = 1u << 6,  /* fast-path socket with a receive timeout */
	LF_F_TCP = 1u << 7,       /* a TCP socket (family in .family) */
	LF_F_SHUT_RD = 1u << 8,   /* fast-path socket after shutdown(SHUT_RD), kept as TCP does */
	LF_F_SHUT_WR = 1u << 9,   /* fast-path socket after shutdown(SHUT_WR) (for TCP_INFO) */
	LF_F_RESET = 1u << 10,    /* fast-path socket whose peer was seen to reset it (for TCP_INFO) */
};

/* Options the application set that the Unix socket cannot hold, as TCP
 * read them back (sockopt.c): packed records of {int16 level, int16 opt,
 * uint8 len, value}, about 28 int-valued ones per socket. */
#define LF_OPTBYTES 256

/* Shared between the fds that dup each other, and across fork. */
struct lf_listener {
	atomic_int refs;
	int family; /* of the TCP listener */
	int rdv;  /* the rendezvous: abstract Unix listener */
	int chan; /* stash of hellos taken by one process for another */
	int lockfd; /* memfd holding the claim lock */
	void *lock; /* its mapping: a robust process-shared mutex */
	int reserve[2]; /* descriptors released for a claim at the fd limit */
};

#define LF_EPOLL_MAX 2
struct lf_epreg {
	int epfd1; /* epoll fd + 1; 0 when unused */
	struct epoll_event ev;
};

struct lf_fd {
	atomic_uint flags;
	int family;                 /* TCP family of a fast-path socket */
	unsigned spin_us;           /* busy-poll budget (0 = off); for an epoll fd: its members' */
	unsigned spin_fail;         /* consecutive spins that ended in a block */
	unsigned spin_skip;         /* calls left without spinning (back-off) */
	int spin_members;           /* epoll fd: registered fast-path sockets that spin */
	struct lf_listener *lst;    /* for listeners with a rendezvous */
	struct lf_listener *owner;  /* for hidden fds: whose they are */
	uint8_t opt[LF_OPTBYTES];   /* options the Unix socket cannot hold, as set */
	uint32_t optset;            /* bytes of opt[] in use */
	uint32_t sockset;           /* which carried SOL_SOCKET options were set */
	struct lf_epreg ep[LF_EPOLL_MAX]; /* epoll registrations before connect */
};

/* LOOPFAST_DEBUG=1: say on stderr why a connection took plain TCP. */
extern bool lf__debug_on;
void lf__debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

extern bool lf__global_optin; /* LOOPFAST_ENABLE=1: opt in every TCP socket */
extern unsigned lf__global_spin_us;

struct lf_fd *lf__fd(int fd); /* NULL when fd is out of range */
void lf__fd_reset(int fd);    /* forget everything about fd (it was closed) */
void lf__fd_copy(int from, int to); /* fd "to" became a dup of "from" */
extern const int lf__carried[];               /* SOL_SOCKET options carried over */
extern const int lf__ncarried;
uint32_t lf__carried_bit(int opt);            /* its bit in lf_fd.sockset */
void lf__listener_put(struct lf_listener *l);
/* Makes a listener's own descriptors follow the listener across exec. */
void lf__listener_cloexec(struct lf_listener *l, bool cloexec);
/* Moves one of loopfast's own descriptors out of the way of the
 * application's numbering and marks it hidden. Returns the new fd. */
int lf__fd_hide(int fd, struct lf_listener *owner);
/* Holds (hold=true) or releases the listener's reserve descriptors. */
void lf__listener_reserve(struct lf_listener *l, bool hold);
/* The application is about to reuse a hidden fd's number: move it. */
void lf__fd_relocate(int fd);

/* ---- spin.c: user-space busy polling for fast-path sockets */

void lf__fd_nonblock(int fd, bool on);
void lf__fd_rcvtimeo(int fd, bool on);
void lf__epoll_member(int epfd, int fd, int op);
extern bool lf__spin_used; /* some socket may spin: wrap signal handlers */

/* ---- sockopt.c: every socket option has a defined answer on the fast path */

/* True when getsockopt/setsockopt of this SOL_SOCKET option must not go to
 * a fast-path socket's Unix socket (the answer would not be TCP's). */
bool lf__sopt_claimed(int level, int opt);
/* The answer for a fast-path socket of TCP family `family`: 0 or -errno. */
int lf__sopt_get(int fd, int family, int level, int opt, void *val, socklen_t *len);
int lf__sopt_set(int fd, int family, int level, int opt, const void *val, socklen_t len);
/* A set that succeeded on a real TCP socket (before connect, or on a
 * listener): remembered so that the fast path answers the same after
 * connect/accept; an option the fast path cannot keep pins the socket to
 * plain TCP. */
void lf__sopt_note(int fd, int level, int opt, const void *val, socklen_t len);
/* True when fd is a fast-path socket (asked of the kernel); fills family. */
bool lf__fast_family(int fd, int *family);

/* ---- negotiate.c */

/* Client side. Returns 1 when it handled the connect (result in *ret and
 * errno), 0 when the caller must do a plain connect. */
int lf__connect(int fd, const struct sockaddr *sa, socklen_t len, int *ret);
/* Server side: set up the rendezvous of a listening socket. 0 or -errno. */
int lf__listen_optin(int fd);
/* After accept returned newfd on lfd: switch it to the fast path when the
 * client negotiated it. */
void lf__accept_claim(int lfd, int newfd, int flags);
/* True when fd is a fast-path socket; fills its TCP endpoints and family. */
bool lf__fast_endpoints(int fd, int *family, struct lf_ep *local, struct lf_ep *peer);

#endif
