/* The stash's index (src/fastpath/stash.c): which two of its slots a
 * client endpoint counts in is a keyed hash, drawn per listener, so that
 * no peer can choose endpoints that share slots with the ones it parks:
 * the endpoints that collide with a given set in one listener are not
 * those that collide in another. (Unkeyed, or under a fixed key, both
 * listeners would agree, and a peer could compute them.)
 *
 * Its ring of poisoned endpoints (hellos dropped while their client may
 * have committed): a connection is reset only for an entry of its own
 * owner's uid, wherever another uid's entry for the same endpoint sits.
 *
 * Built with the library's sources, to reach the index. */
#include "internal.h"
#include "runner.h"
#include "loopfast.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static struct lf_listener *opted_in(int *fd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	*fd = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT_GE(*fd, 0);
	ASSERT_EQ(bind(*fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ASSERT_EQ(listen(*fd, 16), 0);
	ASSERT_EQ(lf_enable_fast_path(*fd), 0);
	struct lf_listener *l = lf__fd(*fd)->lst;
	ASSERT(l != NULL);
	return l;
}

static struct lf_ep ep4(uint32_t addr, uint16_t port)
{
	struct lf_ep e = { .family = AF_INET, .port = port };
	e.addr.v4.s_addr = htonl(addr);
	return e;
}

#define PARKED 200
#define CANDIDATES (16 * 65536)

/* Parks PARKED hellos (clients 127.0.0.1:1..PARKED) in l's stash and
 * marks, in hit[], the candidate endpoints (127.0.0.2..17, every port)
 * whose two slots are both counted: those the stash "might hold". */
static unsigned colliders(struct lf_listener *l, uint8_t *hit)
{
	int sv[2];
	unsigned n = 0;
	struct lf_ep server = ep4(INADDR_LOOPBACK, 80);

	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	lf__listener_lock(l);
	for (int i = 1; i <= PARKED; i++) {
		struct lf_ep c = ep4(INADDR_LOOPBACK, (uint16_t)i);
		ASSERT_EQ(lf__stash_put(l, sv[0], &c, &server, (struct lf_hello){ getuid(), false }, true), 0);
	}
	lf__listener_unlock(l);
	for (unsigned i = 0; i < CANDIDATES; i++) {
		struct lf_ep c = ep4(INADDR_LOOPBACK + 1 + (i >> 16), (uint16_t)i);
		hit[i] = lf__stash_might_hold(l, &c);
		n += hit[i];
	}
	close(sv[0]);
	close(sv[1]);
	return n;
}

static void slots_keyed_per_listener(void)
{
	int f1, f2;
	static uint8_t h1[CANDIDATES], h2[CANDIDATES];
	unsigned n1 = colliders(opted_in(&f1), h1), n2 = colliders(opted_in(&f2), h2), both = 0;
	unsigned fewer = n1 < n2 ? n1 : n2;

	for (unsigned i = 0; i < CANDIDATES; i++)
		both += h1[i] && h2[i];
	fprintf(stderr, "colliders: %u in the first listener, %u in the second, %u in both\n", n1, n2, both);
	/* About (2 * PARKED / 65536)^2 of the candidates collide in each
	 * (39 expected); by chance in both, about 0.002. */
	ASSERT_GT(n1, 0);
	ASSERT_GT(n2, 0);
	ASSERT_LT(both * 2, fewer);
	close(f1);
	close(f2);
}

/* Another uid's hello for the same endpoint was dropped first: the owner's
 * entry is still found (the ring was matched on the endpoint alone, so
 * the first entry decided), and taken once. */
static void poison_matches_the_owner(void)
{
	int f;
	struct lf_listener *l = opted_in(&f);
	struct lf_ep victim = ep4(INADDR_LOOPBACK, 40000), other = ep4(INADDR_LOOPBACK, 40001);
	uint32_t owner = 1000, attacker = 1001, nobody = 1002;

	lf__listener_lock(l);
	lf__stash_poison(l, &victim, attacker);
	lf__stash_poison(l, &other, owner);
	lf__stash_poison(l, &victim, owner);
	ASSERT(lf__stash_poisoned(l, &victim, NULL));
	ASSERT(!lf__stash_poisoned(l, &victim, &nobody));
	ASSERT(lf__stash_poisoned(l, &victim, &owner));
	ASSERT(!lf__stash_poisoned(l, &victim, &owner)); /* taken */
	ASSERT(lf__stash_poisoned(l, &victim, &attacker));
	ASSERT(!lf__stash_poisoned(l, &victim, NULL));
	ASSERT(lf__stash_poisoned(l, &other, &owner));
	lf__listener_unlock(l);
	close(f);
}

static const struct lf_test tests[] = {
	{ "poison_matches_the_owner", poison_matches_the_owner, 0 },
	{ "slots_keyed_per_listener", slots_keyed_per_listener, 0 },
	{ NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
	return lf_test_main(tests, argc, argv);
}
