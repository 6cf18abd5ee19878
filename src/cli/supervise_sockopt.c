/* loopfast run's seccomp supervisor, socket options (docs/supervisor.md,
 * "Socket options"). The filter traps getsockopt and setsockopt at the
 * levels libloopfast answers for a fast-path socket (IPPROTO_IP,
 * IPPROTO_IPV6, IPPROTO_TCP, SOL_TLS: sockopt_rows.c's table) and the
 * SOL_SOCKET options it does not leave to the Unix socket; every other
 * option is the kernel's, untrapped. A trapped call is answered by the
 * library's own getsockopt and setsockopt, on this process's copy of the
 * socket:
 *
 * - a fast-path socket: the library's answer (TCP's, from its reference
 *   connection, or its honest error). The value is read once from the
 *   program (at most SV_OPTMAX bytes) and the answer written back within
 *   the program's optlen, as the kernel does;
 * - a listener served here: the library's calls on the listener's copy
 *   kept here (which knows its marks, and notes what is set on it, for
 *   the connections accepted from it);
 * - any other socket, and SOL_SOCKET options of a process that has the
 *   preload (its library's own calls): the kernel's
 *   (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
 *   A set on a TCP socket that is not connected yet is noted (level and
 *   name only): at its connect or listen the value the kernel then holds
 *   is kept (svo_carry), and goes with the socket to the fast path
 *   (svo_move), or from the listener to each accepted connection
 *   (svo_inherit: but those TCP does not give an accepted socket), as the
 *   preload carries the options it saw set.
 *
 * The library keeps what was set per descriptor, and this process's
 * copies live for one call: the sets made on each fast-path socket are
 * kept here by socket inode (the values the program passed), and before a
 * get the set of that option is made again on the copy, so that the
 * library answers as it would have. A value the kernel held at the
 * switch (svo_carry) that the library cannot set again on a connected
 * socket (IPV6_V6ONLY: the kernel refuses it once bound) is answered as
 * it is, as TCP keeps it and the preload's record answers it. Kept by
 * socket, so a dup, a forked child and a passed descriptor share them,
 * as TCP's options; let go of at the sweep, with the sockets the tree no
 * longer holds. */
#include "supervise.h"
#include "internal.h"
#include "loopfast.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SV_OPTMAX 1024  /* bytes of a value read from or written to the program */
#define SV_SETMAX 1024  /* bytes of sets kept per socket */
#define UNKNOWN 0xffffu /* a set noted by name only (the kernel made it) */
#define KERNEL 0x8000u  /* with a length: the kernel's value, read at the switch */

/* The sets of one socket: packed {int32 level, int32 opt, uint16 len, value}. */
struct sock {
	unsigned long ino; /* 0: a free slot */
	uint16_t used;
	uint8_t *b;
};
#define HEAD 10

static struct sock *tab;
static size_t cap, count;

static size_t slot(unsigned long ino)
{
	return (size_t)(ino * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
}

static struct sock *find(unsigned long ino)
{
	for (size_t i = cap ? slot(ino) : 0; cap && tab[i].ino; i = (i + 1) & (cap - 1))
		if (tab[i].ino == ino)
			return &tab[i];
	return NULL;
}

/* Rebuilds the table with room for want entries, keeping those keep
 * says (all when NULL). */
static bool rebuild(size_t want, const unsigned long *inos, size_t n)
{
	size_t ncap = 64, ocap = cap;
	struct sock *old = tab, *t;

	while (ncap < want * 2)
		ncap *= 2;
	if (!(t = calloc(ncap, sizeof(*t))))
		return false;
	tab = t, cap = ncap, count = 0;
	for (size_t i = 0; i < ocap; i++) {
		if (!old[i].ino)
			continue;
		if (inos && !sv_has_inode(inos, n, old[i].ino)) {
			free(old[i].b);
			continue;
		}
		size_t k = slot(old[i].ino);
		while (tab[k].ino)
			k = (k + 1) & (cap - 1);
		tab[k] = old[i];
		count++;
	}
	free(old);
	return true;
}

static struct sock *get(unsigned long ino)
{
	struct sock *s = find(ino);

	if (s || !ino)
		return s;
	if ((count + 1) * 2 > cap && !rebuild(count + 1, NULL, 0))
		return NULL;
	size_t k = slot(ino);
	while (tab[k].ino)
		k = (k + 1) & (cap - 1);
	tab[k] = (struct sock){ ino, 0, NULL };
	count++;
	return &tab[k];
}

/* The bytes of a kept value of length len. */
static uint16_t size_of(uint16_t len)
{
	return len == UNKNOWN ? 0 : (uint16_t)(len & ~KERNEL);
}

/* The set at offset at of s (its level, name and length); returns the
 * offset of the next one. */
static unsigned entry(const struct sock *s, unsigned at, int32_t *l, int32_t *o, uint16_t *len)
{
	memcpy(l, s->b + at, 4);
	memcpy(o, s->b + at + 4, 4);
	memcpy(len, s->b + at + 8, 2);
	return at + HEAD + size_of(*len);
}

/* The offset of a set of (level, opt) in s, or -1. */
static int at_of(const struct sock *s, int level, int opt)
{
	int32_t l, o;
	uint16_t len;

	for (unsigned at = 0, next; s && at + HEAD <= s->used; at = next) {
		next = entry(s, at, &l, &o, &len);
		if (l == level && o == opt)
			return (int)at;
	}
	return -1;
}

static uint16_t len_at(const struct sock *s, int at)
{
	int32_t l, o;
	uint16_t len;
	entry(s, (unsigned)at, &l, &o, &len);
	return len;
}

static void drop_at(struct sock *s, int at)
{
	int32_t l, o;
	uint16_t len;
	unsigned end = entry(s, (unsigned)at, &l, &o, &len);
	memmove(s->b + at, s->b + end, s->used - end);
	s->used = (uint16_t)(s->used - (end - (unsigned)at));
}

/* Keeps a set (len UNKNOWN: by name only); -ENOBUFS past SV_SETMAX. */
static int put(unsigned long ino, int level, int opt, const void *val, uint16_t len)
{
	struct sock *s = get(ino);
	int at = s ? at_of(s, level, opt) : -1;
	unsigned need = HEAD + size_of(len);
	int32_t l = level, o = opt;

	if (!s)
		return -ENOBUFS;
	if (at >= 0)
		drop_at(s, at);
	uint8_t *b = s->used + need > SV_SETMAX ? NULL : realloc(s->b, s->used + need);
	if (!b)
		return -ENOBUFS;
	s->b = b;
	memcpy(s->b + s->used, &l, 4);
	memcpy(s->b + s->used + 4, &o, 4);
	memcpy(s->b + s->used + 8, &len, 2);
	if (len != UNKNOWN)
		memcpy(s->b + s->used + HEAD, val, size_of(len));
	s->used = (uint16_t)(s->used + need);
	return 0;
}

static unsigned long ino_of(int fd)
{
	struct stat st;
	return fstat(fd, &st) ? 0 : (unsigned long)st.st_ino;
}

/* The Unix sockets this process put in the program on the fast path
 * (a connect, an accept), by inode: a bounded table, a newer socket
 * taking an older one's slot. Such a socket is the library's fast-path
 * socket for as long as it lives (its name, which the library reads to
 * tell, is bound once and never changes), so a trapped option on it
 * skips lf_fast_path_active's look (SO_DOMAIN and getsockname): a
 * socket not found here (a slot taken since, a socket passed from a
 * process with the preload) is looked at as before. The kernel's
 * SO_DOMAIN is still asked (AF_UNIX), so that an inode number reused
 * after the socket's end (a wrap of the kernel's 32-bit count, the
 * sweep not yet made) can only name another Unix socket. */
#define SWITCHED 1024
static unsigned long switched[SWITCHED];

void svo_switched(unsigned long ino)
{
	switched[(ino * 0x9e3779b97f4a7c15ull >> 20) % SWITCHED] = ino;
}

static bool was_switched(unsigned long ino)
{
	return ino && switched[(ino * 0x9e3779b97f4a7c15ull >> 20) % SWITCHED] == ino;
}

size_t svo_count(void)
{
	return count;
}

void svo_sweep(const unsigned long *inos, size_t n)
{
	if (count)
		rebuild(count, inos, n);
	for (size_t i = 0; i < SWITCHED; i++)
		if (switched[i] && !sv_has_inode(inos, n, switched[i]))
			switched[i] = 0;
}

bool svo_pinned(int copy)
{
	struct sock *s = count ? find(ino_of(copy)) : NULL;
	int32_t l, o;
	uint16_t len;

	/* A key (any set pins) seen set, though the kernel has no get for it. */
	for (unsigned at = 0; s && at + HEAD <= s->used;) {
		at = entry(s, at, &l, &o, &len);
		if (lf__sopt_pins(l, o, NULL, 0))
			return true;
	}
	return false;
}

/* Before the switch (connect, listen): each option set by name only is
 * kept with the value the kernel holds now (what the program's set made
 * of it), so that the fast-path socket, or each connection accepted from
 * the listener, answers it as TCP would. */
void svo_carry(int copy)
{
	struct sock *s = count ? find(ino_of(copy)) : NULL;
	int32_t l, o;
	uint16_t len;

	for (unsigned at = 0, next; s && at + HEAD <= s->used;) {
		unsigned char v[256];
		socklen_t vl = sizeof(v);
		next = entry(s, at, &l, &o, &len);
		if (len != UNKNOWN) {
			at = next;
			continue;
		}
		drop_at(s, (int)at); /* put adds it again, at the end */
		if (syscall(SYS_getsockopt, copy, l, o, v, &vl) == 0)
			put(s->ino, l, o, v, (uint16_t)(vl | KERNEL));
	}
}

void svo_move(unsigned long from, unsigned long to)
{
	struct sock *s = find(from), *d;
	uint8_t *b;
	uint16_t used;

	if (!s || !to || from == to)
		return;
	b = s->b, used = s->used;
	s->b = NULL, s->used = 0; /* an empty entry, swept later */
	if ((d = get(to))) {
		free(d->b);
		d->b = b, d->used = used;
	} else {
		free(b);
	}
}

void svo_inherit(unsigned long from, unsigned long to)
{
	struct sock *s = find(from), *d;

	uint8_t *b = NULL;

	if (!s || !s->used || !to || !(b = malloc(s->used)) || !(d = get(to))) {
		free(b);
		return;
	}
	s = find(from); /* get may have moved the table */
	memcpy(b, s->b, s->used);
	free(d->b);
	d->b = b, d->used = s->used;
	/* Less what TCP's accepted socket does not inherit (TCP_FASTOPEN,
	 * TCP_DEFER_ACCEPT, IP_OPTIONS: sockopt_rows.c). */
	for (unsigned at = 0, next; at + HEAD <= d->used; at = next) {
		int32_t l, o;
		uint16_t len;
		next = entry(d, at, &l, &o, &len);
		if (lf__sopt_not_inherited(l, o)) {
			drop_at(d, (int)at);
			next = at;
		}
	}
}

/* The sets whose answer on a fast-path socket is a function of the value
 * alone: the kernel's TCP checks only that it is an int in range
 * (TCP_NODELAY: any; TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT: 1 to a
 * constant), whatever the socket. Go makes all four on each end of each
 * connection. A value the library's set (on its reference connection:
 * 9 calls) once accepted is answered 0 again without it; the set is
 * still kept for the socket's gets (put). Only successes are kept: a
 * value refused is refused by the library each time. */
static struct {
	int opt, val; /* opt 0: a free slot */
} accepted[16];
static unsigned accepted_next;

static bool pure_set(int level, int opt, socklen_t len)
{
	return level == IPPROTO_TCP && len == sizeof(int) &&
	       (opt == TCP_NODELAY || opt == TCP_KEEPIDLE || opt == TCP_KEEPINTVL || opt == TCP_KEEPCNT);
}

static bool was_accepted(int opt, const unsigned char *v)
{
	int val;
	memcpy(&val, v, sizeof(val));
	for (unsigned i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++)
		if (accepted[i].opt == opt && accepted[i].val == val)
			return true;
	return false;
}

static void note_accepted(int opt, const unsigned char *v)
{
	if (!was_accepted(opt, v)) {
		unsigned i = accepted_next++ % (sizeof(accepted) / sizeof(accepted[0]));
		accepted[i].opt = opt;
		memcpy(&accepted[i].val, v, sizeof(int));
	}
}

/* Reads up to n bytes at addr, a page at a time, stopping at the first
 * page that cannot be read; how many were read. A get's buffer carries
 * its input for a few options (TCP_AO_GET_KEYS, the multicast filters). */
static size_t read_some(pid_t pid, uint64_t addr, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		size_t room = 4096 - (size_t)((addr + got) % 4096);
		if (room > n - got)
			room = n - got;
		if (!sv_read(pid, addr + got, (char *)buf + got, room))
			break;
		got += room;
	}
	return got;
}

/* Whether copy is a TCP socket neither connected nor listening: the
 * kernel's TCP_INFO state (one call; any other protocol refuses the
 * level) CLOSE or SYN_SENT, those in which getpeername says ENOTCONN. */
static bool tcp_unconnected(int copy, int dom)
{
	uint8_t st;
	socklen_t l = sizeof(st);

	return (dom == AF_INET || dom == AF_INET6) && syscall(SYS_getsockopt, copy, IPPROTO_TCP, TCP_INFO, &st, &l) == 0 &&
	       l == sizeof(st) && (st == TCP_CLOSE || st == TCP_SYN_SENT);
}

/* A set's value, or a get's room and input (a few options take one:
 * TCP_AO_GET_KEYS, the multicast filters), read once into v (*len
 * bytes, at most SV_OPTMAX); the kernel's errors for a bad length or
 * address, checked as it does. */
static int read_arg(const struct seccomp_notif *n, unsigned char *v, socklen_t *len)
{
	bool set = n->data.nr == __NR_setsockopt;
	uint64_t val = n->data.args[3], lenp = n->data.args[4];
	socklen_t room = (socklen_t)lenp;

	if (!set && !sv_read(n->pid, lenp, &room, sizeof(room)))
		return -EFAULT;
	if ((int)room < 0)
		return -EINVAL;
	*len = room > SV_OPTMAX ? SV_OPTMAX : room;
	if (set)
		return *len && !sv_read(n->pid, val, v, *len) ? -EFAULT : 0;
	memset(v, 0, *len);
	read_some(n->pid, val, v, *len);
	return 0;
}

/* getsockopt and setsockopt, trapped (not SOL_LOOPFAST).
 *
 * The notification's id is checked (NOTIF_ID_VALID) once, after the
 * program's memory was read and before what was read is used or
 * anything is written back: process_vm_readv and _writev go by thread
 * id, which may name another process once the caller is gone. It is not
 * asked again before the reply: an answer to a call no longer waiting
 * fails with ENOENT and does nothing (ids are never reused), and the
 * set or get itself was made on the caller's own socket (sv_grab). */
void svo_opt(int lfd, const struct seccomp_notif *n)
{
	bool set = n->data.nr == __NR_setsockopt;
	int level = (int)n->data.args[1], opt = (int)n->data.args[2], r, copy, t;
	uint64_t val = n->data.args[3], lenp = n->data.args[4];
	unsigned char v[SV_OPTMAX];
	socklen_t len = 0;
	int err;

	if ((copy = sv_grab(lfd, n, (int)n->data.args[0])) < 0)
		return sv_reply(lfd, n->id, 0, true); /* not a descriptor: the kernel's EBADF */
	unsigned long ino = ino_of(copy);
	int dom = sv_domain(copy);
	bool fast = dom == AF_UNIX && (was_switched(ino) || lf_fast_path_active(copy) == 1);
	t = svs_listener(ino);
	/* A process with the preload (a nested loopfast run): its library's
	 * own raw calls at SOL_SOCKET on its Unix sockets (SO_PEERCRED of a
	 * rendezvous, of a hello) want the kernel's answer. Its program's
	 * TCP-level ones reach the filter through its library, and are
	 * answered here as any. */
	if (fast && level == SOL_SOCKET && opt != SO_DOMAIN && opt != SO_PROTOCOL && sv_has_preload(n->pid))
		fast = false;
	if (!fast && t < 0) {
		/* The kernel's. A set on a TCP socket that may still be switched
		 * is noted by name (sv_may_switch decides at the switch), if
		 * the kernel will not refuse its value (EFAULT, EINVAL). */
		if (set && ino && tcp_unconnected(copy, dom) && !read_arg(n, v, &len))
			put(ino, level, opt, NULL, UNKNOWN);
		syscall(SYS_close, copy);
		return sv_reply(lfd, n->id, 0, true);
	}
	err = read_arg(n, v, &len);
	if (!err && set && !sv_valid(lfd, n->id)) /* the value read may be another process's */
		err = -ESRCH;
	if (err) {
		close(copy);
		return sv_reply(lfd, n->id, err, false);
	}
	bool pure = t < 0 && set && pure_set(level, opt, len);
	if (t < 0)
		t = copy;
	if (set) {
		r = pure && was_accepted(opt, v) ? 0 : setsockopt(t, level, opt, v, len) ? -errno : 0;
		if (r == 0 && pure)
			note_accepted(opt, v);
		if (r == 0)
			r = put(ino, level, opt, v, (uint16_t)(len > 255 ? 255 : len));
	} else {
		struct sock *s = fast ? find(ino) : NULL;
		int at = s ? at_of(s, level, opt) : -1;
		uint16_t kl = at >= 0 ? len_at(s, at) : UNKNOWN;
		const struct lf_sopt_row *row = lf__sopt_row(level, opt);
		socklen_t l = len;
		/* The library's record of the set, again; a kernel's value it
		 * refuses on a connected socket is TCP's answer as it is (the
		 * copy rule of a get: what fits, and its length). */
		if (kl != UNKNOWN && setsockopt(t, level, opt, s->b + at + HEAD, size_of(kl)) && (kl & KERNEL) &&
		    row && row->how == LF_SO_TCP) {
			l = len < size_of(kl) ? len : size_of(kl);
			memcpy(v, s->b + at + HEAD, l);
			r = 0;
		} else {
			r = getsockopt(t, level, opt, v, &l) ? -errno : 0;
		}
		/* Written only while the call is still waiting: its thread may
		 * have been killed meanwhile and its id given to another process. */
		if (r == 0 && (int)l >= 0 && l <= len &&
		    (!sv_valid(lfd, n->id) || !sv_write(n->pid, val, v, l) || !sv_write(n->pid, lenp, &l, sizeof(l))))
			r = -EFAULT;
	}
	SV_DEBUG("%ssockopt %d/%d on fd %d of %d (%s): %s", set ? "set" : "get", level, opt, (int)n->data.args[0],
		 n->pid, fast ? "fast path" : "listener", r ? strerror(-r) : "done");
	close(copy);
	sv_reply(lfd, n->id, r, false);
}
