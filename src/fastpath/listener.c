/* The server's side of the rendezvous: what an opted-in TCP listener owns.
 *
 * For a listening socket with inode I, loopfast holds three hidden
 * descriptors, shared by every process that accepts on the listener (a
 * fork family, or programs exec'd with the listener inherited):
 *   - the rendezvous: an abstract Unix stream listener "loopfast/V/L/I"
 *     (V: the protocol's version, LF_PROTO_VERSION),
 *     where fast-path clients queue their hello connections;
 *   - the stash: a datagram socket bound to "loopfast/V/S/I" and connected
 *     to itself (so only holders can write to it), holding hellos one
 *     accept took from the rendezvous for another accept;
 *   - a memfd page: the claim lock (a robust process-shared mutex), an
 *     index of what the stash holds (so that an accept cycles the stash
 *     only when its own hello is there), per-uid counts (no uid may hold
 *     more than its share of the stash) and a ring of poisoned endpoints;
 *     named "loopfast:V:I", it starts with a magic and the version, which
 *     its creator writes before the rendezvous exists and every process
 *     checks before it maps the rest: a page that does not match is never
 *     used, and the listener is then plain TCP in that process.
 * A spare descriptor per listener is kept so that a claim still works when
 * the server is at its descriptor limit (a claim holds one hello at a
 * time).
 *
 * Inheritance: the hidden descriptors follow the listener's close-on-exec
 * flag, and a process that meets a listener it did not set up (after exec,
 * socket activation, SCM_RIGHTS) adopts the existing rendezvous: from its
 * own descriptors when they came along, else from the process that created
 * the rendezvous (pidfd_getfd, same uid). A process that can do neither
 * serves the listener as plain TCP and says so under LOOPFAST_DEBUG.
 *
 * Versions: processes of two versions never meet on the fast path (each
 * finds no rendezvous of the other's). A listener both serve (an inherited
 * listener: nginx's binary upgrade) must then be plain TCP in both, or a
 * client's hello could sit in one version's rendezvous while its doorbell
 * is accepted by the other's process: a process that finds an older
 * version's rendezvous on its listener makes none of its own and shuts the
 * older one (shutdown(SHUT_RD): connects to it are refused, so older
 * clients go plain TCP too). */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DEBUG(...) do { if (lf__debug_on) lf__debug(__VA_ARGS__); } while (0)

#define STASH_MAGIC (0x0053464cu | (uint32_t)('0' + LF_PROTO_VERSION) << 24) /* "LFS" and the version */
#define PAGE_MAGIC 0x6770464cu /* "LFpg", then the version */
#define STASH_BUCKETS 65536 /* counters: each hello counts in two */
#define STASH_UIDS 256
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
#define POISON_RING 256

struct lf_shm {
	uint32_t magic;                      /* PAGE_MAGIC */
	uint32_t version;                    /* LF_PROTO_VERSION */
	pthread_mutex_t lock;
	uint32_t marks;                      /* the creator turned TCP_SAVE_SYN on */
	uint32_t total;                      /* hellos in the stash */
	uint32_t poison_next;
	uint32_t cap;                        /* hellos the stash's buffer holds (its creator measured) */
	struct { uint32_t uid, count; } uids[STASH_UIDS];
	struct { struct lf_ep client; uint32_t uid; } poison[POISON_RING];
	uint16_t bucket[STASH_BUCKETS];      /* stashed hellos per slot of their client endpoint (two each) */
	uint32_t keyed;                      /* key is set (under the lock, at the first put) */
	uint64_t key[2];                     /* the buckets' hash key: no peer can aim at a bucket */
};

struct stash_msg {
	uint32_t magic;
	uint32_t uid;
	uint32_t vouched; /* counted against no share */
	uint32_t pad;
	struct lf_ep client;
	struct lf_ep server;  /* the server end its name gave (where sock_diag looks) */
	uint64_t checked;     /* when stashed, or when the kernel last said its connection exists */
	uint64_t accepted;    /* when its connection was first seen accepted (0: not yet) */
};

#define SHM_SIZE ((sizeof(struct lf_shm) + 4095) & ~(size_t)4095)

static void shm_name(char *buf, size_t len, unsigned long ino)
{
	snprintf(buf, len, "loopfast:" LF_STR(LF_PROTO_VERSION) ":%lu", ino);
}

static struct lf_shm *shm_create(unsigned long ino, int *fdp)
{
	char name[64];
	pthread_mutexattr_t a;
	struct lf_shm *p;

	shm_name(name, sizeof(name), ino);
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (ftruncate(fd, SHM_SIZE) ||
	    (p = mmap(NULL, SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		lf__sys_close(fd);
		return NULL;
	}
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&p->lock, &a);
	pthread_mutexattr_destroy(&a);
	p->magic = PAGE_MAGIC;
	p->version = LF_PROTO_VERSION;
	*fdp = fd;
	return p;
}

/* Another process's page (found by its name, which anyone of our uid can
 * give a memfd): used only if it is of this version's layout. */
static struct lf_shm *shm_map(int fd)
{
	struct stat st;
	struct lf_shm *p;

	if (fstat(fd, &st) || (size_t)st.st_size < SHM_SIZE ||
	    (p = mmap(NULL, SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		return NULL;
	bool ours = p->magic == PAGE_MAGIC;
	ours = ours && p->version == LF_PROTO_VERSION;
	if (!ours) {
		DEBUG("shared page: magic %#x version %u, not this version's (%d): not used", p->magic, p->version,
		      LF_PROTO_VERSION);
		munmap(p, SHM_SIZE);
		return NULL;
	}
	return p;
}

void lf__listener_lock(struct lf_listener *l)
{
	if (pthread_mutex_lock(&l->shm->lock) == EOWNERDEAD)
		pthread_mutex_consistent(&l->shm->lock);
}

void lf__listener_unlock(struct lf_listener *l)
{
	pthread_mutex_unlock(&l->shm->lock);
}

/* ---- the stash */

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
	return (struct slots){ { (unsigned)(h % STASH_BUCKETS), (unsigned)((h >> 32) % STASH_BUCKETS) } };
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
		uint64_t t = lf__now_ns();
		m->key[0] = t ^ (uint64_t)(uintptr_t)m ^ ((uint64_t)getpid() << 32);
		m->key[1] = ~t * 0x9e3779b97f4a7c15ull;
	}
	m->keyed = 1;
}

static uint32_t *uid_count(struct lf_shm *m, uint32_t uid, bool add)
{
	int free_slot = -1;

	for (int i = 0; i < STASH_UIDS; i++) {
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

static int send_fd(int sock, const void *buf, size_t len, int fd)
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
	return syscall(SYS_sendmsg, sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT) == (long)len ? 0 : -1;
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
	ssize_t n = syscall(SYS_recvmsg, sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

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
		bool ours = r == sizeof(sm) && sm.magic == STASH_MAGIC;
		if (fd < 0 || !ours || !sm.vouched) {
			if (fd >= 0 && ours)
				drop(l, &sm, fd, LF_EV_DROPPED);
			else if (fd >= 0)
				lf__sys_close(fd);
			else if (ours)
				index_del(m, &sm);
			return true;
		}
		if (send_fd(l->chan, &sm, sizeof(sm), fd))
			index_del(m, &sm);
		lf__sys_close(fd);
	}
	return false;
}

int lf__stash_put(struct lf_listener *l, int fd, const struct lf_ep *client, const struct lf_ep *server, uint32_t uid,
		  bool vouched)
{
	struct lf_shm *m = l->shm;
	struct stash_msg sm;
	uint32_t *c = vouched ? NULL : uid_count(m, uid, true);

	if ((!vouched && (!c || *c >= share(m))) || m->total >= m->cap)
		return -ENOSPC;
	key_set(m);
	memset(&sm, 0, sizeof(sm)); /* no uninitialised padding in the message */
	sm.magic = STASH_MAGIC;
	sm.uid = uid;
	sm.vouched = vouched;
	sm.client = *client;
	sm.server = *server;
	sm.checked = lf__now_ns();
	if (send_fd(l->chan, &sm, sizeof(sm), fd)) {
		/* Too many descriptors in flight for this user: for an
		 * unvouched hello, its uid's share is full; a vouched one takes
		 * the place of an unvouched one. */
		if (errno != ETOOMANYREFS)
			return -errno;
		if (!vouched || !evict_one(l) || send_fd(l->chan, &sm, sizeof(sm), fd))
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

bool lf__hello_dead(int fd)
{
	int ev = lf__sys_poll1(fd, POLLIN | POLLRDHUP, 0), inq = 0;

	/* A Unix stream whose peer has closed polls HUP (and IN, for the
	 * end of stream): dead unless bytes are still queued. */
	return ev > 0 && (ev & (POLLHUP | POLLERR)) && syscall(SYS_ioctl, fd, FIONREAD, &inq) == 0 && inq == 0;
}

bool lf__stash_might_hold(struct lf_listener *l, const struct lf_ep *client)
{
	return l->shm->keyed && slots_held(l->shm, slots_of(l->shm, client));
}

bool lf__listener_serves(const struct lf_listener *l, const struct lf_ep *server)
{
	struct lf_diag_sock d;
	struct lf_ep from = *server;

	if (lf__ep_equal(server, &l->ep))
		return true;
	from.port = 0; /* no connection comes from port 0: the lookup reaches the listener */
	return lf__ep_is_any(&l->ep) && server->port == l->ep.port && lf__diag_listener(server, &from, &d) == 0 &&
	       d.inode == (uint32_t)l->ino;
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
	if (age < STASH_YOUNG_NS || (age < STASH_GRACE_NS && (sm->vouched ||
	    !(lf__sys_poll1(fd, POLLIN | POLLRDHUP, 0) & (POLLHUP | POLLRDHUP)))))
		return true;
	if (lf__diag_socket(&sm->client, &sm->server, &d) || d.state == TCP_TIME_WAIT || d.state == TCP_CLOSE ||
	    d.uid != sm->uid)
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
		      uint32_t *uid, unsigned same[2])
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
	if (fd < 0 || r != sizeof(sm) || sm.magic != STASH_MAGIC) {
		/* Only holders write to the stash; a message without its
		 * descriptor is one the kernel could not install (the process
		 * at its descriptor limit): its hello is lost. */
		if (fd >= 0)
			lf__sys_close(fd);
		if (r == sizeof(sm) && sm.magic == STASH_MAGIC)
			index_del(m, &sm);
		return 0;
	}
	if (lf__ep_equal(&sm.client, client)) {
		index_del(m, &sm);
		*uid = sm.uid;
		*fdp = fd;
		return 1;
	}
	if (lf__hello_dead(fd)) {
		index_del(m, &sm);
		lf__sys_close(fd);
	} else if (!still_wanted(l, &sm, fd, now, &vouch)) {
		drop(l, &sm, fd, LF_EV_UNVOUCHED);
	} else if ((vouch && vouched_now(m, &sm)) || send_fd(l->chan, &sm, sizeof(sm), fd)) {
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
	uint32_t uid;
	int fd;

	if (syscall(SYS_recvmsg, l->chan, &mh, MSG_PEEK | MSG_DONTWAIT) == (long)sizeof(sm) && sm.magic == STASH_MAGIC &&
	    now - sm.checked < (sm.vouched ? STASH_GRACE_NS : STASH_YOUNG_NS))
		return;
	next_hello(l, &nobody, slots_of(l->shm, &nobody), now, &fd, &uid, same);
}

bool lf__stash_holds(const struct lf_listener *l)
{
	return l->shm->keyed && l->shm->total;
}

int lf__stash_take(struct lf_listener *l, const struct lf_ep *client, uint32_t *uid)
{
	struct lf_shm *m = l->shm;
	struct slots k = slots_of(m, client);
	unsigned same[2] = { 0, 0 };
	uint64_t now = lf__now_ns();
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
	for (unsigned i = 0, n = m->total; i < n && (r = next_hello(l, client, k, now, &fd, uid, same)) == 0; i++)
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
	unsigned i = m->poison_next++ % POISON_RING;

	m->poison[i].client = *client;
	m->poison[i].uid = uid;
}

bool lf__stash_poisoned(struct lf_listener *l, const struct lf_ep *client, uint32_t *uid)
{
	struct lf_shm *m = l->shm;
	unsigned n = m->poison_next < POISON_RING ? m->poison_next : POISON_RING;

	for (unsigned i = 0; i < n; i++) {
		if (lf__ep_equal(&m->poison[i].client, client)) {
			*uid = m->poison[i].uid;
			memset(&m->poison[i], 0, sizeof(m->poison[i]));
			return true;
		}
	}
	return false;
}

/* ---- the hidden descriptors */

void lf__listener_reserve(struct lf_listener *l, bool hold)
{
	if (hold && l->reserve < 0) {
		int fd = lf__fd_dup_hidden(l->shmfd);
		if (fd >= 0)
			lf__fd_hide(fd, &l->reserve);
	} else if (!hold && l->reserve >= 0) {
		lf__fd_unhide(l->reserve);
		lf__sys_close(l->reserve);
		l->reserve = -1;
	}
}

void lf__listener_put(struct lf_listener *l)
{
	if (!l || atomic_fetch_sub(&l->refs, 1) != 1)
		return;
	lf__listener_reserve(l, false);
	int fds[3] = { l->rdv, l->chan, l->shmfd };
	for (int i = 0; i < 3; i++) {
		if (fds[i] >= 0) {
			lf__fd_unhide(fds[i]);
			lf__sys_close(fds[i]);
		}
	}
	if (l->shm)
		munmap(l->shm, SHM_SIZE);
	if (atomic_load(&l->inheritable))
		atomic_fetch_sub(&lf__rendezvous_inheritable, 1);
	free(l);
}

atomic_int lf__rendezvous_inheritable;

void lf__listener_cloexec(struct lf_listener *l, bool cloexec)
{
	int fds[3] = { l->rdv, l->chan, l->shmfd };
	bool was = atomic_exchange(&l->inheritable, !cloexec);

	if (was != !cloexec)
		atomic_fetch_add(&lf__rendezvous_inheritable, cloexec ? -1 : 1);
	for (int i = 0; i < 3; i++)
		lf__sys_fcntl(fds[i], F_SETFD, cloexec ? FD_CLOEXEC : 0);
}

static struct lf_listener *listener_new(int family, unsigned long ino, const struct lf_ep *ep)
{
	struct lf_listener *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	atomic_init(&l->refs, 1);
	l->family = family;
	l->ino = ino;
	l->ep = *ep;
	l->rdv = l->chan = l->shmfd = l->reserve = -1;
	return l;
}

/* Takes the three descriptors (already ours) as the listener's own. */
static int listener_finish(struct lf_listener *l, int rdv, int chan, int shmfd)
{
	if (!l->shm && !(l->shm = shm_map(shmfd))) {
		lf__sys_close(rdv);
		lf__sys_close(chan);
		lf__sys_close(shmfd);
		return -EPROTO;
	}
	lf__fd_hide(rdv, &l->rdv);
	lf__fd_hide(chan, &l->chan);
	lf__fd_hide(shmfd, &l->shmfd);
	lf__listener_reserve(l, true);
	return 0;
}

static bool has_name(int fd, const struct sockaddr_un *want, socklen_t wl)
{
	struct sockaddr_un sun;
	socklen_t len = sizeof(sun);
	return lf__sys_getsockname(fd, (void *)&sun, &len) == 0 && len == wl && !memcmp(&sun, want, wl);
}

/* The three descriptors of inode `ino` among the open fds of process
 * `pid` (0: this one). For another process, takes copies (pidfd_getfd:
 * same uid and ptrace rights). Returns 0 when all three were found. */
static int find_fds(pid_t pid, int family, unsigned long ino, int out[3])
{
	struct sockaddr_un rn, sn;
	socklen_t rl = lf__name_listener(&rn, family, ino), sl = lf__name_stash(&sn, family, ino);
	char dir[64], link[96], target[256], want[96], name[64];
	int pidfd = -1;
	DIR *d;
	struct dirent *e;

	out[0] = out[1] = out[2] = -1;
	shm_name(name, sizeof(name), ino);
	snprintf(want, sizeof(want), "/memfd:%s (deleted)", name);
	snprintf(dir, sizeof(dir), pid ? "/proc/%d/fd" : "/proc/self/fd", (int)pid);
	if (pid && (pidfd = lf__sys_pidfd_open(pid, 0)) < 0)
		return -errno;
	if (!(d = opendir(dir))) {
		if (pidfd >= 0)
			lf__sys_close(pidfd);
		return -errno;
	}
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name), mine = -1;
		snprintf(link, sizeof(link), "%s/%d", dir, fd);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0 || (!pid && fd == dirfd(d)))
			continue;
		target[n] = '\0';
		bool sock = !strncmp(target, "socket:", 7), memfd = !strcmp(target, want);
		if (!sock && !memfd)
			continue;
		if (!pid)
			mine = fd;
		else if ((mine = lf__sys_pidfd_getfd(pidfd, fd, 0)) < 0)
			continue;
		int slot = memfd ? 2 : has_name(mine, &rn, rl) ? 0 : has_name(mine, &sn, sl) ? 1 : -1;
		if (slot >= 0 && out[slot] < 0) {
			out[slot] = mine;
			if (pid)
				lf__sys_fcntl(mine, F_SETFD, FD_CLOEXEC);
		} else if (pid) {
			lf__sys_close(mine);
		}
	}
	closedir(d);
	if (pidfd >= 0)
		lf__sys_close(pidfd);
	if (out[0] >= 0 && out[1] >= 0 && out[2] >= 0)
		return 0;
	for (int i = 0; pid && i < 3; i++)
		if (out[i] >= 0)
			lf__sys_close(out[i]);
	return -ENOENT;
}

/* The rendezvous exists and is not among our descriptors: ask who made it
 * (SO_PEERCRED of a connection to it) and, when that process is of our uid
 * and the listener's, take copies of its descriptors. The probe connection
 * carries no name: whoever meets it drops it. */
static pid_t creator(const struct sockaddr_un *rn, socklen_t rl, uint32_t listener_uid)
{
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	int probe = lf__sys_socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	pid_t pid = -1;

	if (probe < 0)
		return -1;
	if (lf__sys_connect(probe, (void *)rn, rl) == 0 &&
	    lf__sys_getsockopt(probe, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0 && cr.uid == listener_uid &&
	    cr.uid == geteuid())
		pid = cr.pid;
	lf__sys_close(probe);
	return pid;
}

static int adopt_from_creator(int family, unsigned long ino, uint32_t listener_uid, int out[3])
{
	struct sockaddr_un rn;
	socklen_t rl = lf__name_listener(&rn, family, ino);
	pid_t pid = creator(&rn, rl, listener_uid);

	return pid > 0 ? find_fds(pid, family, ino, out) : -EPERM;
}

/* The descriptor bound to name n in process pid (0: ours; else a copy,
 * pidfd_getfd), or -1. */
static int named_fd(pid_t pid, const struct sockaddr_un *n, socklen_t nl)
{
	char dir[64], link[96], target[64];
	int pidfd = pid ? lf__sys_pidfd_open(pid, 0) : -1, found = -1;
	DIR *d;
	struct dirent *e;

	snprintf(dir, sizeof(dir), pid ? "/proc/%d/fd" : "/proc/self/fd", (int)pid);
	if ((pid && pidfd < 0) || !(d = opendir(dir))) {
		if (pidfd >= 0)
			lf__sys_close(pidfd);
		return -1;
	}
	while (found < 0 && (e = readdir(d))) {
		int fd = atoi(e->d_name), mine;
		snprintf(link, sizeof(link), "%s/%d", dir, fd);
		ssize_t k = readlink(link, target, sizeof(target) - 1);
		if (k <= 0 || strncmp(target, "socket:", 7) || (!pid && fd == dirfd(d)))
			continue;
		mine = pid ? lf__sys_pidfd_getfd(pidfd, fd, O_CLOEXEC) : fd;
		if (mine >= 0 && has_name(mine, n, nl))
			found = mine;
		else if (pid && mine >= 0)
			lf__sys_close(mine);
	}
	closedir(d);
	if (pidfd >= 0)
		lf__sys_close(pidfd);
	return found;
}

/* An older version's rendezvous on this listener (see "Versions" above):
 * true if there is one. Each is shut, through our own descriptor when it
 * came along with the listener, else through a copy of its creator's
 * (same uid as us and the listener, as for adoption). */
static bool other_version(int family, unsigned long ino, uint32_t listener_uid)
{
	bool found = false;

	for (int v = LF_PROTO_OLDEST; v < LF_PROTO_VERSION; v++) {
		struct sockaddr_un n;
		socklen_t nl = lf__name_listener_of(&n, v, family, ino);
		if (lf__diag_rendezvous(&n, nl) != 1)
			continue;
		found = true;
		int fd = named_fd(0, &n, nl);
		pid_t pid = fd < 0 ? creator(&n, nl, listener_uid) : 0;
		if (pid > 0)
			fd = named_fd(pid, &n, nl);
		DEBUG("listener inode %lu: served by protocol %d too (rendezvous %s): plain TCP", ino, v,
		      fd >= 0 ? "shut" : "out of reach");
		if (fd >= 0)
			lf__sys_shutdown(fd, SHUT_RD);
		if (fd >= 0 && pid > 0)
			lf__sys_close(fd);
	}
	return found;
}

static bool tcp_family(int fd, int *family)
{
	int v = 0;
	socklen_t l = sizeof(v);

	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) || v != IPPROTO_TCP)
		return false;
	l = sizeof(v);
	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) || (v != AF_INET && v != AF_INET6))
		return false;
	*family = v;
	return true;
}

/* Creates the three descriptors of a new rendezvous. -EADDRINUSE: the
 * names are taken (another process of the family, or a squatter). */
static int create_fds(int family, unsigned long ino, int out[3], struct lf_shm **shm)
{
	struct sockaddr_un rn, sn;
	socklen_t rl = lf__name_listener(&rn, family, ino), sl = lf__name_stash(&sn, family, ino);
	int big = 4 << 20, e = 0;

	out[0] = lf__sys_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	out[1] = lf__sys_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	out[2] = -1;
	if (out[0] < 0 || out[1] < 0 || !(*shm = shm_create(ino, &out[2])))
		e = errno ? errno : ENOMEM;
	else if (lf__sys_bind(out[1], (void *)&sn, sl) || lf__sys_connect(out[1], (void *)&sn, sl) ||
		 lf__sys_bind(out[0], (void *)&rn, rl) || lf__sys_listen(out[0], SOMAXCONN))
		e = errno;
	if (e) {
		for (int i = 0; i < 3; i++)
			if (out[i] >= 0)
				lf__sys_close(out[i]);
		if (*shm)
			munmap(*shm, SHM_SIZE);
		*shm = NULL;
		return -e;
	}
	lf__no_rights(out[0]); /* inherited by every connection accepted on it */
	if (lf__sys_setsockopt(out[1], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)))
		lf__sys_setsockopt(out[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	if (lf__sys_setsockopt(out[1], SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)))
		lf__sys_setsockopt(out[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	/* What the buffer really holds: without CAP_NET_ADMIN, SO_SNDBUF is
	 * capped by net.core.wmem_max (212992 by default: about 400 hellos).
	 * The limits follow, so that no uid's share is promised room that a
	 * send would then refuse. */
	int sb = 0;
	socklen_t sbl = sizeof(sb);
	lf__sys_getsockopt(out[1], SOL_SOCKET, SO_SNDBUF, &sb, &sbl);
	int cap = sb / STASH_MSG_COST;
	(*shm)->cap = cap < 16 ? 16 : cap > STASH_MAX ? STASH_MAX : (uint32_t)cap;
	return 0;
}

int lf__listen_optin(int fd)
{
	struct lf_fd *f = lf__fd(fd);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct lf_ep ep;
	struct stat st;
	struct lf_shm *shm = NULL;
	int family, v = 0, fds[3], r;
	socklen_t vl = sizeof(v);

	if (!f)
		return -EOPNOTSUPP;
	if (f->lst)
		return 0;
	if (atomic_load(&f->flags) & LF_F_NOFAST)
		return -EADDRINUSE;
	lf__fd_on_put(lf__listener_put); /* before any entry holds a listener */
	atomic_fetch_and(&f->flags, ~LF_F_OPTIN);
	if (!tcp_family(fd, &family) || lf__sys_getsockname(fd, (void *)&ss, &sl) ||
	    !lf__ep_from_sockaddr(&ep, (void *)&ss, sl) || fstat(fd, &st)) {
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
		return -EOPNOTSUPP;
	}
	/* Only listeners a loopback client can reach; SO_REUSEPORT groups
	 * cannot be served (the kernel picks the member per connection), nor
	 * TCP_DEFER_ACCEPT ones (the accept waits for data the doorbell
	 * never carries). */
	int defer = 0;
	socklen_t dl = sizeof(defer);
	if ((!lf__ep_is_loopback(&ep) && !lf__ep_is_any(&ep)) ||
	    (lf__sys_getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &v, &vl) == 0 && v) ||
	    (lf__sys_getsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, &dl) == 0 && defer)) {
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
		return 0;
	}
	/* A linger the listener has, its accepted sockets inherit: known
	 * here, once, as if set through us, the claim turns it off on each
	 * (bell.c: the claim's mark must go out ahead of a FIN, never a
	 * reset) and carries it to the fast-path socket. */
	struct linger lg;
	socklen_t ll = sizeof(lg);
	if (lf__sys_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0 && lg.l_onoff)
		f->sockset |= lf__carried_bit(SO_LINGER);
	struct lf_listener *l = listener_new(family, (unsigned long)st.st_ino, &ep);
	if (!l)
		return -ENOMEM;
	/* Ours already (exec kept them)? Else new, or another process's. */
	r = find_fds(0, family, l->ino, fds);
	struct lf_fd *h = r ? NULL : lf__fd(fds[0]);
	if (h && (atomic_load(&h->flags) & LF_F_HIDDEN) && h->home) {
		/* Another descriptor of this listener (not a dup we saw: fd
		 * passing to ourselves, a raw dup) already has them. */
		free(l);
		l = (struct lf_listener *)((char *)h->home - offsetof(struct lf_listener, rdv));
		atomic_fetch_add(&l->refs, 1);
		f->lst = l;
		return 0;
	}
	/* Excluded (LOOPFAST_EXCLUDE): no new rendezvous, plain TCP as for a
	 * listener nobody can reach. One that a process sharing the listener
	 * made is still served (adopted below): refusing it would split its
	 * connections. */
	bool excluded = r && lf__excluded(&ep);
	if (r && !excluded && other_version(family, l->ino, st.st_uid)) {
		free(l);
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
		return 0;
	}
	if (r && st.st_uid == geteuid()) {
		r = excluded ? -EADDRINUSE : create_fds(family, l->ino, fds, &shm);
		l->shm = shm;
	}
	if (r == -EADDRINUSE || (r && st.st_uid != geteuid()))
		r = adopt_from_creator(family, l->ino, st.st_uid, fds);
	if (r || (r = listener_finish(l, fds[0], fds[1], fds[2]))) {
		if (l->shm && r)
			munmap(l->shm, SHM_SIZE);
		DEBUG("listener fd %d: no rendezvous (%s): plain TCP only", fd,
		      excluded ? "excluded by LOOPFAST_EXCLUDE" : strerror(-r));
		free(l);
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
		return excluded ? 0 : r;
	}
	if (shm) {
		/* The SYN of each connection says whether its client queued a
		 * hello (LF_HELLO_MSS), so that plain clients cost an accept no
		 * rendezvous work. Not if the application saves SYNs itself:
		 * reading the saved SYN consumes it. */
		int on = 0;
		socklen_t ol = sizeof(on);
		if (lf__sys_getsockopt(fd, IPPROTO_TCP, TCP_SAVE_SYN, &on, &ol) == 0 && !on) {
			on = 1;
			l->shm->marks = lf__sys_setsockopt(fd, IPPROTO_TCP, TCP_SAVE_SYN, &on, sizeof(on)) == 0;
		}
	}
	lf__diag_ready(); /* the claim asks sock_diag about every hello */
	if (!(lf__sys_fcntl(fd, F_GETFD, 0) & FD_CLOEXEC))
		lf__listener_cloexec(l, false);
	f->lst = l;
	return 0;
}

/* listen() on an opted-in socket bound to its port: the rendezvous is made
 * before the kernel's listen, so that a client that finds the listener
 * through sock_diag always finds its rendezvous too. Made after, a client
 * arriving in between (one that retried until the server listened) would
 * be told "no rendezvous" for this very listener, and the first of its
 * connections to succeed would be plain TCP. A socket that listen() binds
 * itself has no port before it, and nobody can know the port before
 * listen() returns it: it gets its rendezvous just after (false here).
 * The rendezvous is named after the socket's inode, which listen() does
 * not change; nobody can reach it before the listener exists. */
bool lf__listen_early(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct lf_ep ep;

	if (lf__sys_getsockname(fd, (void *)&ss, &sl) || !lf__ep_from_sockaddr(&ep, (void *)&ss, sl) || !ep.port)
		return false;
	lf__listen_optin(fd);
	return true;
}

/* The kernel's listen() failed after lf__listen_early: the socket is as it
 * was before (flags: its flags then), without the rendezvous. */
void lf__listen_undo(int fd, unsigned flags)
{
	struct lf_fd *f = lf__fd(fd);
	struct lf_listener *l = f ? f->lst : NULL;

	if (!f)
		return;
	if (l && l->shm && lf__listener_marks(l)) {
		int off = 0; /* loopfast turned it on */
		lf__sys_setsockopt(fd, IPPROTO_TCP, TCP_SAVE_SYN, &off, sizeof(off));
	}
	f->lst = NULL;
	lf__listener_put(l);
	atomic_store(&f->flags, flags);
}

/* At start-up (LOOPFAST_ENABLE): listening sockets this process inherited
 * get their rendezvous now, before the program forks workers, so that
 * every worker shares it. */
void lf__adopt_inherited(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int fds[64], n = 0;

	if (!d)
		return;
	while ((e = readdir(d)) && n < 64) {
		int fd = atoi(e->d_name), v = 0;
		socklen_t l = sizeof(v);
		if (fd != dirfd(d) && e->d_name[0] != '.' &&
		    lf__sys_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) == 0 && v)
			fds[n++] = fd;
	}
	closedir(d);
	for (int i = 0; i < n; i++)
		lf__listen_optin(fds[i]);
}

bool lf__listener_marks(const struct lf_listener *l)
{
	return __atomic_load_n(&l->shm->marks, __ATOMIC_RELAXED);
}

/* The program sets TCP_SAVE_SYN on a listener whose saved SYNs loopfast
 * reads: they are the program's now (reading one consumes it), for every
 * process that accepts on the listener. Accepts then look for a hello
 * whatever the SYN said (drains stay bounded). */
void lf__listener_app_saves_syn(int fd)
{
	struct lf_fd *f = lf__fd(fd);

	if (f && f->lst)
		__atomic_store_n(&f->lst->shm->marks, 0, __ATOMIC_RELAXED);
}
