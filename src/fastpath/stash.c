/* The stash of a listener: hellos one accept took from the rendezvous for
 * another accept (listener.c owns the rendezvous and the page).
 *
 * The stash is a datagram socket bound to "loopfast/V/S/I" and connected
 * to itself (so only the listener's holders can write to it): each
 * message (struct stash_msg, LF_STASH_MAGIC) carries one hello's
 * descriptor, its client and server endpoints, its sender's uid and
 * whether the kernel has vouched for its connection. In the listener's
 * shared page (struct lf_shm) it keeps, under the page's lock: an index
 * of what it holds (a counting filter keyed with SipHash, so that an
 * accept cycles the stash only when its own hello may be there), per-uid
 * counts (no uid may hold more than its share of the stash) and a ring of
 * poisoned endpoints (hellos dropped while their client may have
 * committed). Every take tidies it: hellos nobody will claim are dropped
 * at the pace of the accepts. */
#include "internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#define STASH_MAX 4096     /* all hellos together, at most: the stash's buffer may hold fewer */
#define STASH_MSG_COST 1024 /* buffer bytes one stashed hello takes (measured: about 770) */
/* Unvouched hellos one uid may keep in the stash: a quarter of it, and a
 * quarter of the descriptors the kernel lets this user have in flight. */
#define STASH_SHARE(cap) ((cap) / 4)
/* A hello the kernel has not vouched for is checked once it is 10 ms old
 * if its client has closed it (a client sends its SYN right after its
 * hello, and keeps the hello open until its connect is done), else once
 * it is a second old (a client stalled between the two); one vouched
 * for, once a second: dropped once its connection has gone, or has been
 * accepted for a second (a claim takes it right after its accept). */
#define STASH_YOUNG_NS 10000000ull
#define STASH_GRACE_NS 1000000000ull
#define STASH_BOUND_GAP_NS 20000000ull /* 50 dumps of the bind table a second at most */
#define STASH_BOUND_SHARE 50           /* and 2% of the process's time */

struct stash_msg {
	uint32_t magic;
	uint32_t uid;
	uint32_t vouched; /* counted against no share */
	uint32_t shm;     /* its name asks for the shared-memory tier */
	struct lf_ep client;
	struct lf_ep server;  /* the server end its name gave (where sock_diag looks) */
	uint64_t checked;     /* when stashed, or when the kernel last said its connection exists */
	uint64_t accepted;    /* when its connection was first seen accepted (0: not yet) */
};

void lf__stash_init(struct lf_shm *m, int chan)
{
	int big = 4 << 20;

	if (lf__sys_setsockopt(chan, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)))
		lf__sys_setsockopt(chan, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	if (lf__sys_setsockopt(chan, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)))
		lf__sys_setsockopt(chan, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	/* What the buffer really holds: without CAP_NET_ADMIN, SO_SNDBUF is
	 * capped by net.core.wmem_max (212992 by default: about 400 hellos).
	 * The limits follow, so that no uid's share is promised room that a
	 * send would then refuse. */
	int sb = 0;
	socklen_t sbl = sizeof(sb);
	lf__sys_getsockopt(chan, SOL_SOCKET, SO_SNDBUF, &sb, &sbl);
	int cap = sb / STASH_MSG_COST;
	m->cap = cap < 16 ? 16 : cap > STASH_MAX ? STASH_MAX : (uint32_t)cap;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND(v0, v1, v2, v3)                                                        \
	do {                                                                            \
		v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);               \
		v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                   \
		v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                   \
		v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);               \
	} while (0)

/* The two slots of a client endpoint in the stash's index (a counting
 * filter): SipHash-1-3 of family, port and address under the listener's
 * random key, so that no peer can choose endpoints that share slots. An
 * accept cycles the stash only when both its slots count something: with
 * S hellos stashed, about (2S/65536)^2 of the accepts whose hello is not
 * there (1 in 1700 at S = 800), instead of every accept whose one unkeyed
 * bucket a peer had filled. */
struct slots {
	unsigned s[2];
};

static struct slots slots_of(const struct lf_shm *m, const struct lf_ep *ep)
{
	uint64_t w[3] = { (uint64_t)ep->family << 16 | ep->port, 0, 0 };
	uint64_t v0 = m->key[0] ^ 0x736f6d6570736575ull, v1 = m->key[1] ^ 0x646f72616e646f6dull;
	uint64_t v2 = m->key[0] ^ 0x6c7967656e657261ull, v3 = m->key[1] ^ 0x7465646279746573ull;

	memcpy(&w[1], &ep->addr, ep->family == AF_INET ? 4 : 16);
	for (int i = 0; i < 3; i++) {
		v3 ^= w[i];
		SIPROUND(v0, v1, v2, v3);
		v0 ^= w[i];
	}
	v3 ^= 24ull << 56;
	SIPROUND(v0, v1, v2, v3);
	v0 ^= 24ull << 56;
	v2 ^= 0xff;
	for (int i = 0; i < 3; i++)
		SIPROUND(v0, v1, v2, v3);
	uint64_t h = v0 ^ v1 ^ v2 ^ v3;
	return (struct slots){ { (unsigned)(h % LF_STASH_BUCKETS), (unsigned)((h >> 32) % LF_STASH_BUCKETS) } };
}

static bool slots_held(const struct lf_shm *m, struct slots k)
{
	return m->bucket[k.s[0]] && m->bucket[k.s[1]];
}

/* Under the lock: the key is drawn by the first put (no bucket holds
 * anything before it). */
static void key_set(struct lf_shm *m)
{
	if (m->keyed)
		return;
	if (getrandom(m->key, sizeof(m->key), GRND_NONBLOCK) != sizeof(m->key)) {
		uint64_t t = lf__sys_now_ns();
		m->key[0] = t ^ (uint64_t)(uintptr_t)m ^ ((uint64_t)getpid() << 32);
		m->key[1] = ~t * 0x9e3779b97f4a7c15ull;
	}
	m->keyed = 1;
}

static uint32_t *uid_count(struct lf_shm *m, uint32_t uid, bool add)
{
	int free_slot = -1;

	for (int i = 0; i < LF_STASH_UIDS; i++) {
		if (m->uids[i].count && m->uids[i].uid == uid)
			return &m->uids[i].count;
		if (!m->uids[i].count && free_slot < 0)
			free_slot = i;
	}
	if (!add || free_slot < 0)
		return NULL;
	m->uids[free_slot].uid = uid;
	return &m->uids[free_slot].count;
}

static void index_del(struct lf_shm *m, const struct stash_msg *sm)
{
	uint32_t *c = sm->vouched ? NULL : uid_count(m, sm->uid, false);
	struct slots k = slots_of(m, &sm->client);

	if (c && *c)
		(*c)--;
	for (int i = 0; i < 2; i++)
		if (m->bucket[k.s[i]])
			m->bucket[k.s[i]]--;
	if (m->total)
		m->total--;
}

int lf__send_fd(int sock, const void *buf, size_t len, int fd)
{
	struct iovec iov = { (void *)buf, len };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} c;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof(c.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);

	memset(&c, 0, sizeof(c));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return lf__sys_sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)len ? 0 : -1;
}

/* Receives one stash message and its descriptor (never more than one: any
 * extra is closed). Returns the byte count or -1; *fd is -1 when none. */
static ssize_t recv_fd(int sock, void *buf, size_t len, int *fd)
{
	struct iovec iov = { buf, len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} c;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof(c.buf) };
	ssize_t n = lf__sys_recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	*fd = -1;
	if (n < 0)
		return n;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int x;
			memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (*fd < 0)
				*fd = x;
			else
				lf__sys_close(x);
		}
	}
	return n;
}

/* Unvouched hellos one uid may keep: a quarter of the stash, and a
 * quarter of the descriptors this process may have in flight (the kernel
 * counts stashed hellos against the server user's RLIMIT_NOFILE: sendmsg
 * fails with ETOOMANYREFS beyond it, for a process without
 * CAP_SYS_RESOURCE). Read at each put: the limit can change. */
static uint32_t share(const struct lf_shm *m)
{
	struct rlimit rl;
	uint32_t s = STASH_SHARE(m->cap);

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 4 < s)
		s = (uint32_t)(rl.rlim_cur / 4);
	return s;
}

/* Drops a stashed hello its client may have committed to (poisoned).
 * ev: LF_EV_DROPPED for its uid's share, LF_EV_UNVOUCHED when the kernel
 * no longer finds its connection. */
static void drop(struct lf_listener *l, const struct stash_msg *sm, int fd, enum lf_event ev)
{
	index_del(l->shm, sm);
	lf__stash_poison(l, &sm->client, sm->uid);
	lf__count(ev);
	lf__sys_close(fd);
}

/* Makes room for a vouched hello when the kernel refuses another
 * descriptor in flight: drops the oldest unvouched hello in the stash
 * (its client is poisoned: reset should its connection arrive). At most
 * one round; false when every stashed hello is vouched. */
static bool evict_one(struct lf_listener *l)
{
	struct lf_shm *m = l->shm;
	struct stash_msg sm;
	int fd;

	for (unsigned i = 0, n = m->total; i < n; i++) {
		ssize_t r = recv_fd(l->chan, &sm, sizeof(sm), &fd);
		if (r < 0)
			return false;
		bool ours = r == sizeof(sm) && sm.magic == LF_STASH_MAGIC;
		if (fd < 0 || !ours || !sm.vouched) {
			if (fd >= 0 && ours)
				drop(l, &sm, fd, LF_EV_DROPPED);
			else if (fd >= 0)
				lf__sys_close(fd);
			else if (ours)
				index_del(m, &sm);
			return true;
		}
		if (lf__send_fd(l->chan, &sm, sizeof(sm), fd))
			index_del(m, &sm);
		lf__sys_close(fd);
	}
	return false;
}

int lf__stash_put(struct lf_listener *l, int fd, const struct lf_ep *client, const struct lf_ep *server,
		  struct lf_hello h, bool vouched)
{
	struct lf_shm *m = l->shm;
	struct stash_msg sm;
	uint32_t *c = vouched ? NULL : uid_count(m, h.uid, true);

	if ((!vouched && (!c || *c >= share(m))) || m->total >= m->cap)
		return -ENOSPC;
	key_set(m);
	memset(&sm, 0, sizeof(sm)); /* no uninitialised padding in the message */
	sm.magic = LF_STASH_MAGIC;
	sm.uid = h.uid;
	sm.shm = h.shm;
	sm.vouched = vouched;
	sm.client = *client;
	sm.server = *server;
	sm.checked = lf__sys_now_ns();
	if (lf__send_fd(l->chan, &sm, sizeof(sm), fd)) {
		/* Too many descriptors in flight for this user: for an
		 * unvouched hello, its uid's share is full; a vouched one takes
		 * the place of an unvouched one. */
		if (errno != ETOOMANYREFS)
			return -errno;
		if (!vouched || !evict_one(l) || lf__send_fd(l->chan, &sm, sizeof(sm), fd))
			return -ENOSPC;
	}
	if (c)
		(*c)++;
	struct slots k = slots_of(m, client);
	m->bucket[k.s[0]]++;
	m->bucket[k.s[1]]++;
	m->total++;
	return 0;
}

bool lf__stash_hello_dead(int fd)
{
	int ev = lf__sys_poll1(fd, POLLIN | POLLRDHUP, 0), inq = 0;

	/* A Unix stream whose peer has closed polls HUP (and IN, for the
	 * end of stream): dead unless bytes are still queued. */
	return ev > 0 && (ev & (POLLHUP | POLLERR)) && lf__sys_ioctl(fd, FIONREAD, &inq) == 0 && inq == 0;
}

bool lf__stash_might_hold(struct lf_listener *l, const struct lf_ep *client)
{
	return l->shm->keyed && slots_held(l->shm, slots_of(l->shm, client));
}

/* An unvouched hello its sender keeps open, whose connection the kernel
 * does not have: its client may be between its hello and its SYN
 * (stopped, preempted), which it shows if its TCP socket is still bound
 * to the endpoint the hello names, owned by the hello's sender, and
 * neither connecting nor listening (a dump of the kernel's bind table,
 * Linux 6.7; an older kernel shows none: dropped). The dump walks the
 * whole table, whose size any uid sets (each socket it holds bound is
 * one more to walk and to read: 60000 of them made a dump take tens of
 * milliseconds, under the claim lock), so a process starts one only
 * STASH_BOUND_GAP_NS after the last ended and STASH_BOUND_SHARE times as
 * long as it took: at most 1/STASH_BOUND_SHARE of its time, whatever the
 * table holds. A hello that comes sooner is dropped, as on an older
 * kernel (junk hellos held open cannot make the server walk the table
 * more often, and are not kept longer for it). The next start is the
 * process's, claimed atomically (threads may hold different listeners'
 * locks) with a provisional one, which a thread or a child forked during
 * the dump that never sees its end keeps no longer than the gap. */
static bool stalled(struct stash_msg *sm)
{
	static _Atomic uint64_t next;
	uint64_t t = lf__sys_now_ns(), n = atomic_load_explicit(&next, memory_order_relaxed);

	if (t < n || !atomic_compare_exchange_strong(&next, &n, t + STASH_BOUND_GAP_NS))
		return false;
	int r = lf__diag_bound(&sm->client, sm->uid);
	uint64_t end = lf__sys_now_ns(), gap = (end - t) * STASH_BOUND_SHARE;
	atomic_store(&next, end + (gap > STASH_BOUND_GAP_NS ? gap : STASH_BOUND_GAP_NS));
	if (r != 1)
		return false;
	sm->checked = end;
	return true;
}

/* Is a stashed hello still wanted? Not once no TCP connection from its
 * client endpoint to the listener, owned by its sender, exists (sock_diag:
 * its client never connected, or has gone and the connection with it), nor
 * once that connection has been accepted for a grace period without its
 * claim (it was served as plain TCP); asked when due (above). A client that wrote and closed keeps
 * its end, in FIN_WAIT2, until its connection is accepted: still wanted.
 * When the kernel finds the connection of a hello it had not vouched for,
 * the hello leaves its uid's share (*vouch). Under the lock. */
static bool still_wanted(const struct lf_listener *l, struct stash_msg *sm, int fd, uint64_t now, bool *vouch)
{
	struct lf_diag_sock d;
	uint64_t age = now - sm->checked;

	*vouch = false;
	if (age < STASH_YOUNG_NS)
		return true;
	bool open = !sm->vouched && !(lf__sys_poll1(fd, POLLIN | POLLRDHUP, 0) & (POLLHUP | POLLRDHUP));
	if (age < STASH_GRACE_NS && (sm->vouched || open))
		return true;
	int r = lf__diag_socket(&sm->client, &sm->server, &d);
	if (r == -ENOENT && open)
		return stalled(sm);
	if (r || d.state == TCP_TIME_WAIT || d.state == TCP_CLOSE || d.uid != sm->uid)
		return false;
	if (lf__diag_socket(&sm->server, &sm->client, &d) == 0 && d.inode != 0) {
		if (sm->accepted && now - sm->accepted >= STASH_GRACE_NS)
			return false;
		if (!sm->accepted)
			sm->accepted = now;
	}
	/* Its connection must be to this listener to count as vouched for:
	 * the sender's own connection to a listener of its own on our port
	 * at another address (127.0.0.2, [::1] beside 0.0.0.0) is not. */
	if (!sm->vouched && !lf__listener_serves(l, &sm->server))
		return false;
	*vouch = !sm->vouched;
	sm->checked = now;
	return true;
}

/* A stashed hello the kernel now vouches for leaves its uid's share.
 * Always false (for the caller's chain). */
static bool vouched_now(struct lf_shm *m, struct stash_msg *sm)
{
	uint32_t *c = uid_count(m, sm->uid, false);

	if (c && *c)
		(*c)--;
	sm->vouched = 1;
	return false;
}

/* Takes the stash's oldest hello: 1 and its fd when it is the one for
 * `client`; else puts it back at the end, or drops it when nobody will
 * claim it (0), or -1 when the stash is empty or unreadable. Under the
 * lock; same[i] counts the slots of those put back that are k's i-th. */
static int next_hello(struct lf_listener *l, const struct lf_ep *client, struct slots k, uint64_t now, int *fdp,
		      struct lf_hello *h, unsigned same[2])
{
	struct lf_shm *m = l->shm;
	struct stash_msg sm;
	bool vouch;
	int fd;
	ssize_t r;

	while ((r = recv_fd(l->chan, &sm, sizeof(sm), &fd)) < 0 && errno == EINTR)
		;
	if (r < 0)
		return -1;
	if (fd < 0 || r != sizeof(sm) || sm.magic != LF_STASH_MAGIC) {
		/* Only holders write to the stash; a message without its
		 * descriptor is one the kernel could not install (the process
		 * at its descriptor limit): its hello is lost. */
		if (fd >= 0)
			lf__sys_close(fd);
		if (r == sizeof(sm) && sm.magic == LF_STASH_MAGIC)
			index_del(m, &sm);
		return 0;
	}
	if (lf__ep_equal(&sm.client, client)) {
		index_del(m, &sm);
		*h = (struct lf_hello){ sm.uid, sm.shm != 0 };
		*fdp = fd;
		return 1;
	}
	if (lf__stash_hello_dead(fd)) {
		index_del(m, &sm);
		lf__sys_close(fd);
	} else if (!still_wanted(l, &sm, fd, now, &vouch)) {
		drop(l, &sm, fd, LF_EV_UNVOUCHED);
	} else if ((vouch && vouched_now(m, &sm)) || lf__send_fd(l->chan, &sm, sizeof(sm), fd)) {
		index_del(m, &sm);
		lf__sys_close(fd);
	} else {
		lf__sys_close(fd); /* the stash holds its own reference */
		struct slots o = slots_of(m, &sm.client);
		for (int i = 0; i < 2; i++)
			same[i] += (o.s[0] == k.s[i]) + (o.s[1] == k.s[i]);
	}
	return 0;
}

/* Every take looks at the oldest hello (peeked: no descriptor comes with
 * it), whatever its slots, and checks it when it is due: the stash is
 * tidied at the pace of the accepts, whoever filled it. One not due stays
 * where it is (in the order of its accept, most often next). */
static void tidy(struct lf_listener *l, uint64_t now)
{
	static const struct lf_ep nobody; /* port 0: names no connection */
	struct stash_msg sm;
	struct iovec iov = { &sm, sizeof(sm) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	unsigned same[2] = { 0, 0 };
	struct lf_hello h;
	int fd;

	if (lf__sys_recvmsg(l->chan, &mh, MSG_PEEK | MSG_DONTWAIT) == (ssize_t)sizeof(sm) && sm.magic == LF_STASH_MAGIC &&
	    now - sm.checked < (sm.vouched ? STASH_GRACE_NS : STASH_YOUNG_NS))
		return;
	next_hello(l, &nobody, slots_of(l->shm, &nobody), now, &fd, &h, same);
}

bool lf__stash_holds(const struct lf_listener *l)
{
	return l->shm->keyed && l->shm->total;
}

int lf__stash_take(struct lf_listener *l, const struct lf_ep *client, struct lf_hello *h)
{
	struct lf_shm *m = l->shm;
	struct slots k = slots_of(m, client);
	unsigned same[2] = { 0, 0 };
	uint64_t now = lf__sys_now_ns();
	int fd = -1, r = 0;

	if (!m->keyed || !m->total)
		return -1;
	tidy(l, now);
	if (!slots_held(m, k))
		return -1;
	/* The stash is FIFO: cycle it at most once round. Every hello passed
	 * over is checked, so that what nobody will claim does not stay to be
	 * cycled again. */
	same[0] = same[1] = 0;
	for (unsigned i = 0, n = m->total; i < n && (r = next_hello(l, client, k, now, &fd, h, same)) == 0; i++)
		;
	if (r == 1)
		return fd;
	/* Not found after a full round: the slots count what the round saw
	 * of them (other clients share slots). They counted more when a
	 * process died while it held a hello it had taken from the stash. */
	for (int i = 0; r == 0 && i < 2; i++)
		if (same[i] < m->bucket[k.s[i]])
			m->bucket[k.s[i]] = (uint16_t)same[i];
	return -1;
}

void lf__stash_poison(struct lf_listener *l, const struct lf_ep *client, uint32_t uid)
{
	struct lf_shm *m = l->shm;
	unsigned i = m->poison_next++ % LF_STASH_POISON;

	m->poison[i].client = *client;
	m->poison[i].uid = uid;
}

/* Was a hello for `client` dropped while its client may have committed?
 * uid NULL: whether any entry names it (nothing cleared); else only an
 * entry of that uid (the kernel's owner of the connection) counts, and it
 * is cleared: an entry another uid's hello left for the same endpoint is
 * not its client's. */
bool lf__stash_poisoned(struct lf_listener *l, const struct lf_ep *client, const uint32_t *uid)
{
	struct lf_shm *m = l->shm;
	unsigned n = m->poison_next < LF_STASH_POISON ? m->poison_next : LF_STASH_POISON;

	for (unsigned i = 0; i < n; i++) {
		if (!lf__ep_equal(&m->poison[i].client, client) || (uid && m->poison[i].uid != *uid))
			continue;
		if (uid)
			memset(&m->poison[i], 0, sizeof(m->poison[i]));
		return true;
	}
	return false;
}
