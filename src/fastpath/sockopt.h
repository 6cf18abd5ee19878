/* Socket options on a fast-path socket (sockopt.c) and loopfast's own,
 * SOL_LOOPFAST (api.c): what interpose.c's getsockopt and setsockopt hand
 * over. The top of the internal layers. */
#ifndef LF_SOCKOPT_H
#define LF_SOCKOPT_H

#include <stdbool.h>
#include <sys/socket.h>

/* ---- sockopt_rows.c: how each option is answered (compiled alone into
 * the library and the CLI) */

enum lf_sopt_how {
	LF_SO_UNIX,     /* SOL_SOCKET: the Unix socket answers as TCP would */
	LF_SO_FAMILY,   /* SO_DOMAIN, SO_PROTOCOL: fixed up after the Unix socket answered */
	LF_SO_TCP,      /* TCP's own answer (the reference; a set is recorded) */
	LF_SO_NOREC,    /* TCP's own answer, never recorded: it follows the connection, not the set */
	LF_SO_ERR_SET,  /* a set fails with err; a get is TCP's own */
	LF_SO_ERR_ON,   /* a set that turns it on fails with err; off is TCP's own */
	LF_SO_ERR_GET,  /* a get fails with err */
	LF_SO_INFO,     /* TCP_INFO: the state follows the connection */
	LF_SO_CCINFO,   /* TCP_CC_INFO: TCP's size, nothing known */
	LF_SO_LPORT,    /* IP_PROTOCOL: TCP answers its local port */
	LF_SO_PEERNAME, /* SO_PEERNAME: the TCP peer's address */
};

struct lf_sopt_row {
	short level, first, last; /* options first..last */
	unsigned char how;        /* enum lf_sopt_how */
	unsigned char err;
};

/* The row of an option, or NULL (unknown to loopfast). */
const struct lf_sopt_row *lf__sopt_row(int level, int opt);
/* True for an option set on a listener that TCP's accepted socket does not
 * inherit (it reads TCP's default there). */
bool lf__sopt_not_inherited(int level, int opt);
/* True when getsockopt/setsockopt of this SOL_SOCKET option must not go to
 * a fast-path socket's Unix socket (the answer would not be TCP's). */
bool lf__sopt_claimed(int level, int opt);
/* The levels other than SOL_SOCKET that the table answers (at most max,
 * into levels); returns how many. */
int lf__sopt_levels(int *levels, int max);

/* ---- sockopt.c */

/* The answer for a fast-path socket of TCP family `family`: 0 or -errno. */
int lf__sopt_get(int fd, int family, int level, int opt, void *val, socklen_t *len);
int lf__sopt_set(int fd, int family, int level, int opt, const void *val, socklen_t len);
/* A set that succeeded on a real TCP socket (before connect, or on a
 * listener): remembered so that the fast path answers the same after
 * connect/accept; an option the fast path cannot keep pins the socket to
 * plain TCP. */
void lf__sopt_note(int fd, int level, int opt, const void *val, socklen_t len);
/* A connection just accepted: it started with its listener's records
 * (connect.c); those TCP does not give an accepted socket go
 * (lf__sopt_not_inherited), so it reads TCP's default for them. */
void lf__sopt_accepted(int fd);

/* ---- pinned.c: the options the fast path cannot keep (compiled alone
 * into the library and the CLI) */

/* Whether a value turns an option on (any byte non-zero). */
bool lf__sopt_turns_on(const void *val, socklen_t len);
/* Whether this set pins a socket to plain TCP for life. */
bool lf__sopt_pins(int level, int opt, const void *val, socklen_t len);
/* The first such option the kernel says is on for TCP socket fd, as
 * level << 16 | opt, or 0: for a socket whose sets loopfast did not see
 * (loopfast run's supervisor, which notes which were set before a
 * switch, not their values). */
int lf__sopt_pinned_on(int fd);
/* True when fd is a fast-path socket (asked of the kernel); fills family. */
bool lf__fast_family(int fd, int *family);

/* ---- api.c: SOL_LOOPFAST */

/* SOL_LOOPFAST options (api.c): 0 or -errno. */
int lf__api_setopt(int fd, int opt, const void *val, socklen_t len);
int lf__api_getopt(int fd, int opt, void *val, socklen_t *len);

#endif
