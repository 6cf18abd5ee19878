/* The server side of the negotiation: an accepted TCP connection X meets
 * its client's hello.
 *
 * A fast-path client queues its hello (a Unix connection to the
 * listener's rendezvous, bound to a name that says which TCP connection it
 * is for) before it sends its SYN, so when accept returns X, X's hello is
 * already in the rendezvous backlog or in the stash. The accept takes
 * candidates for X under the claim lock (everything else it meets goes to
 * the stash for its own accept), then, without the lock, keeps the first
 * candidate the kernel vouches for: sock_diag reports that the TCP socket
 * at the other end of X exists and belongs to the hello's sender
 * (SO_PEERCRED). Asked for every hello, those of this process's own uid
 * included: a server that changed credentials (root, then a service
 * account) shares its uid with processes that cannot ptrace it, and a
 * hello costs one exact lookup, no more than a check of our credentials.
 * Nothing the peer wrote is believed: the name only says where to look.
 * The winner replaces X under X's fd number, and X is closed after the
 * claim's mark (bell.c; the doorbell carried no data). No candidate: X
 * stays plain TCP. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <string.h>
#include <unistd.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif

#define DEBUG(...) do { if (lf__debug_on) lf__debug(__VA_ARGS__); } while (0)

#define MAX_CAND 8

/* Under valgrind, whose descriptor limit is its own: an accept past it is
 * made by the kernel and then closed by valgrind (the hello is lost). */
static bool emulated_limit(void)
{
#if __has_include(<valgrind/valgrind.h>)
	return RUNNING_ON_VALGRIND;
#else
	return false;
#endif
}

/* Reads a hello connection's sender (uid) and which TCP connection it
 * names, from its peer's name sun (what accept4 reported: the kernel's
 * answer, the same as getpeername's, a Unix socket being bound at most
 * once). False for anything that is not a well-formed client name. */
static bool hello_of(int u, const struct sockaddr_un *sun, socklen_t sl, struct lf_ep *client, struct lf_ep *server,
		     struct lf_hello *h)
{
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	unsigned long ino;
	int fam;

	if (lf__name_parse(sun, sl, &ino, &fam, client, server) != LF_NAME_CLIENT ||
	    lf__sys_getsockopt(u, SOL_SOCKET, SO_PEERCRED, &cr, &crl))
		return false;
	*h = (struct lf_hello){ cr.uid, lf__name_asks_shm(sun, sl) };
	return true;
}

/* Does the kernel vouch that the sender of a hello (uid) is the owner of
 * the client end of the connection (peer -> local)? */
static bool vouched(uint32_t uid, const struct lf_ep *peer, const struct lf_ep *local)
{
	struct lf_diag_sock d;

	return lf__diag_socket(peer, local, &d) == 0 && d.uid == uid && d.state != TCP_TIME_WAIT &&
	       d.state != TCP_CLOSE;
}

/* Candidates for the connection whose client end is `client`: from the
 * stash first, then from the rendezvous. Whatever else the rendezvous
 * holds on the way is stashed for its own accept, or dropped when it
 * cannot be anyone's: malformed, or from a uid over its share of
 * unvouched hellos (the server's own uid's included) and not vouched for
 * now either (remembered as poison, since its client may have committed).
 * A hello the kernel vouches for (its client has sent its SYN: a real
 * connection waiting for its accept) is never refused a place for its
 * uid's share. Under the claim lock; every call is non-blocking. */
static int take(struct lf_listener *l, const struct lf_ep *client, int *cand, struct lf_hello *hs, int max,
		bool *released)
{
	struct lf_ep c, s;
	struct lf_hello h;
	int n = 0, u;

	/* Room for one hello, should the server be at its descriptor limit:
	 * receiving from the stash then would lose it (the kernel drops a
	 * descriptor it cannot install), and so would an accept under an
	 * emulated limit (valgrind). A claim holds one hello at a time. The
	 * kernel's own accept loses nothing at the limit (it fails before it
	 * dequeues): with nothing stashed, the spare is given up only when an
	 * accept says EMFILE, and not given up and taken again per claim. */
	if (!*released && (lf__stash_holds(l) || emulated_limit())) {
		lf__listener_reserve(l, false);
		*released = true;
	}
	while (n < max && (u = lf__stash_take(l, client, &hs[n])) >= 0)
		cand[n++] = u;
	if (n)
		return n;
	/* The hello of an accepted connection was queued before its SYN: it
	 * is among what the rendezvous holds now, which is at most its
	 * backlog and one more. Never more than that, or a flood arriving
	 * behind it would keep this accept busy. */
	for (int budget = SOMAXCONN + 1; budget > 0; budget--) {
		struct sockaddr_un sun;
		socklen_t sl = sizeof(sun);
		u = lf__sys_accept4(l->rdv, (void *)&sun, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (u < 0 && errno == EINTR)
			continue;
		if (u < 0 && (errno == EMFILE || errno == ENFILE) && !*released) {
			lf__listener_reserve(l, false);
			*released = true;
			continue;
		}
		if (u < 0)
			break;
		if (!hello_of(u, &sun, sl, &c, &s, &h) || s.port != l->ep.port) {
			lf__sys_close(u);
			continue;
		}
		if (lf__ep_equal(&c, client)) {
			cand[n] = u;
			hs[n++] = h;
			break;
		}
		int r = lf__stash_put(l, u, &c, &s, h, false);
		if (r == -ENOSPC && vouched(h.uid, &c, &s) && lf__listener_serves(l, &s))
			r = lf__stash_put(l, u, &c, &s, h, true);
		if (r) {
			DEBUG("stash: hello from uid %u for port %u dropped (over its share or stash full)", h.uid, c.port);
			lf__count(LF_EV_DROPPED);
			lf__stash_poison(l, &c, h.uid);
		}
		lf__sys_close(u);
	}
	return n;
}

/* Empties the rendezvous (as far as take() goes): every hello goes to the
 * stash for its own accept, or is dropped. */
static void drain(struct lf_listener *l)
{
	static const struct lf_ep nobody; /* port 0: names no connection */
	int cand[1];
	struct lf_hello h;
	bool released = false;

	lf__listener_lock(l);
	int n = take(l, &nobody, cand, &h, 1, &released);
	lf__listener_unlock(l);
	if (n)
		lf__sys_close(cand[0]);
	if (released)
		lf__listener_reserve(l, true);
}

/* Did the SYN of the accepted connection say that its client queued a
 * hello? 1 yes, 0 no, -1 unknown (no saved SYN: it came before the
 * listener saved them, or as a SYN cookie). Unless *have, *local gets
 * the connection's local end from the same SYN, if it holds it (*have). */
static int marked(int fd, struct lf_ep *local, bool *have)
{
	uint8_t syn[256];
	socklen_t len = sizeof(syn);

	if (lf__sys_getsockopt(fd, IPPROTO_TCP, TCP_SAVED_SYN, syn, &len))
		return -1;
	if (!*have)
		*have = lf__syn_local(syn, len, local);
	return lf__syn_marked(syn, len);
}

/* Resets a TCP connection (no TIME_WAIT, the client learns at once). */
static void reset(int fd)
{
	struct linger lg = { 1, 0 };
	lf__sys_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

int lf__accept_claim(int lfd, int newfd, int flags, const struct sockaddr *sa, socklen_t salen)
{
	struct lf_fd *f = lf__fd(lfd), *nf = lf__fd(newfd);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct lf_ep peer, local;
	int cand[MAX_CAND], unx = -1, n;
	struct lf_hello hs[MAX_CAND];
	bool asks_shm = false;
	bool released = false;

	if (!f || !nf)
		return 0;
	lf__fd_reset(newfd);
	if (!f->lst) {
		unsigned fl = atomic_load(&f->flags);
		if (!(fl & LF_F_OPTIN) && !lf__global_optin)
			return 0;
		/* A listener that reached us without listen() here (exec,
		 * socket activation, SCM_RIGHTS): opt it in now. */
		if ((fl & LF_F_NOFAST) || lf__listen_optin(lfd) || !f->lst)
			return 0;
	}
	struct lf_listener *l = f->lst;
	if (!lf__ep_from_sockaddr(&peer, sa, salen) || !lf__ep_is_loopback(&peer))
		return 0;
	/* The local end: a listener bound to one address gives it; on a
	 * wildcard one, the SYN that said "hello queued" holds it too, and
	 * a plain client's accept never needs it. */
	bool have_local = !lf__ep_is_any(&l->ep);
	if (have_local)
		local = l->ep; /* bound to one address: what the accepted socket has */
	if (lf__listener_marks(l) && marked(newfd, &local, &have_local) == 0) {
		lf__count(LF_EV_PLAIN_PEER);
		/* A plain client: no hello to look for. But clients fall back
		 * to plain TCP when the rendezvous is full: whatever a flood
		 * left there would stay for good if only fast-path accepts
		 * drained it. Plain accepts do, at most once a second. */
		uint64_t now = lf__sys_now_ns();
		if (now - l->drained_ns > 1000000000ull) {
			l->drained_ns = now;
			drain(l);
		}
		return 0;
	}
	if (!have_local &&
	    (lf__sys_getsockname(newfd, (void *)&ss, &sl) || !lf__ep_from_sockaddr(&local, (void *)&ss, sl)))
		return 0;
	do {
		lf__listener_lock(l);
		n = take(l, &peer, cand, hs, MAX_CAND, &released);
		lf__listener_unlock(l);
		for (int i = 0; i < n; i++) {
			if (unx < 0 && lf__stash_hello_dead(cand[i])) {
				/* Its client died before its connect, or gave it
				 * up: the port has been used again since. */
				DEBUG("accept fd %d: a dead hello for port %u: dropped", newfd, peer.port);
				lf__sys_close(cand[i]);
			} else if (unx < 0 && vouched(hs[i].uid, &peer, &local)) {
				unx = cand[i];
				asks_shm = hs[i].shm;
			} else {
				if (unx < 0) {
					DEBUG("accept fd %d: hello from uid %u for port %u not vouched for: dropped", newfd,
					      hs[i].uid, peer.port);
					lf__count(LF_EV_UNVOUCHED);
				}
				lf__sys_close(cand[i]);
			}
		}
	} while (unx < 0 && n > 0); /* a forged hello may hide the real one */
	if (released)
		lf__listener_reserve(l, true);
	if (unx < 0) {
		struct lf_diag_sock d;
		lf__listener_lock(l);
		bool poisoned = lf__stash_poisoned(l, &peer, NULL);
		lf__listener_unlock(l);
		/* Only if the dropped hello was its client's own: another uid
		 * naming this connection must not be able to get it reset. */
		if (poisoned) {
			poisoned = lf__diag_socket(&peer, &local, &d) == 0;
			lf__listener_lock(l);
			poisoned = poisoned && lf__stash_poisoned(l, &peer, &d.uid);
			lf__listener_unlock(l);
		}
		if (!poisoned) {
			DEBUG("accept fd %d: no hello for port %u: plain TCP", newfd, peer.port);
			lf__count(LF_EV_PLAIN_PEER);
			return 0;
		}
		/* Its hello was dropped while its client may have committed:
		 * fail the connection on both ends rather than split it. */
		DEBUG("accept fd %d: hello for port %u was dropped: connection reset", newfd, peer.port);
		reset(newfd);
		return -ECONNABORTED;
	}
	bool fail;
	struct lf_shm_conn *shm = lf__shm_offer(unx, lfd, newfd, asks_shm, &fail); /* the tier's answer, before any byte of ours */
	if (fail) {
		lf__sys_close(unx);
		reset(newfd);
		return -ECONNABORTED;
	}
	lf__count(LF_EV_FAST_SERVER);
	if (lf__switch_fd(unx, newfd, f->lst->family, f, flags & SOCK_NONBLOCK, flags & SOCK_CLOEXEC, LF_SW_SERVER) < 0) {
		lf__sys_close(unx);
		lf__shm_put(shm);
		return -ECONNABORTED;
	}
	lf__shm_attach(newfd, shm);
	return 0;
}
