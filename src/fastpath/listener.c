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
 *     accept took from the rendezvous for another accept (stash.c);
 *   - a memfd page: the claim lock (a robust process-shared mutex) and
 *     what the stash keeps there (stash.c: its index, per-uid counts and
 *     a ring of poisoned endpoints);
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
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEBUG(...) do { if (lf__debug_on) lf__debug(__VA_ARGS__); } while (0)

#define SHM_SIZE ((sizeof(struct lf_shm) + 4095) & ~(size_t)4095)

static void shm_name(char *buf, size_t len, unsigned long ino)
{
	snprintf(buf, len, LF_PAGE_NAME "%lu", ino);
}

void lf__mutex_init_shared(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}

static struct lf_shm *shm_create(unsigned long ino, int *fdp)
{
	char name[64];
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
	lf__mutex_init_shared(&p->lock);
	p->magic = LF_PAGE_MAGIC;
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
	bool ours = p->magic == LF_PAGE_MAGIC;
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

/* ---- who a listener serves */

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

static void listener_get(struct lf_listener *l)
{
	atomic_fetch_add(&l->refs, 1);
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

/* Creates the three descriptors of a new rendezvous. -EADDRINUSE: the
 * names are taken (another process of the family, or a squatter). */
static int create_fds(int family, unsigned long ino, int out[3], struct lf_shm **shm)
{
	struct sockaddr_un rn, sn;
	socklen_t rl = lf__name_listener(&rn, family, ino), sl = lf__name_stash(&sn, family, ino);
	int e = 0;

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
	lf__sys_no_rights(out[0]); /* inherited by every connection accepted on it */
	lf__stash_init(*shm, out[1]);
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
	lf__fd_on_listener(listener_get, lf__listener_put); /* before any entry holds a listener */
	atomic_fetch_and(&f->flags, ~LF_F_OPTIN);
	if (!lf__sys_tcp_family(fd, &family) || lf__sys_getsockname(fd, (void *)&ss, &sl) ||
	    !lf__ep_from_sockaddr(&ep, (void *)&ss, sl) || fstat(fd, &st)) {
		atomic_fetch_or(&f->flags, LF_F_NOFAST);
		return -EOPNOTSUPP;
	}
	/* Only listeners a loopback client can reach; SO_REUSEPORT groups
	 * cannot be served (the kernel picks the member per connection, and
	 * a client whose hello went to another member than its SYN would
	 * wait for ever: docs/reuseport.md), nor
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
