/* The fast path's protocol: what two loopfast processes must agree on to
 * meet (docs/security.md). Its one home: the version, the abstract names
 * (their encoders and parser, addrmap.c), the SYN's mark (its parser,
 * syn.c), the claim's mark, the stash's message magic and the listener's
 * shared page's magic and name. Built once (the loopfast-protocol library)
 * and linked by the fast path, the command (status reads names), the
 * benchmarks (the connect bench's flooder builds names), the fuzz targets
 * and the unit tests. Nothing here is exported from libloopfast (the lf__
 * prefix, hidden). */
#ifndef LF_PROTOCOL_H
#define LF_PROTOCOL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/* The protocol's version. Every constant below reads it: the abstract
 * names (so that processes of two versions never meet on the fast path:
 * each finds no rendezvous of the other's), the claim's mark, the stash's
 * message magic, and the listener's shared page (its memfd's name, and its
 * header, checked before a page is adopted). Any change to one of those,
 * or to the shared page's layout (listener.c, stash.c), bumps it. A build
 * may set another (-DLF_PROTO_VERSION=N: test_versions.py). */
#ifndef LF_PROTO_VERSION
#define LF_PROTO_VERSION 9
#endif
/* The oldest version whose rendezvous a listener looks for (listener.c:
 * a listener that another version's process serves is served as plain
 * TCP by this one). Protocol 3 is main bea563d. */
#define LF_PROTO_OLDEST 3
#define LF_STR_(x) #x
#define LF_STR(x) LF_STR_(x)
/* Every abstract name starts with LF_NAME_ROOT and its version: those of
 * this version with LF_NAME_PREFIX (after the NUL). */
#define LF_NAME_ROOT "loopfast/"
#define LF_NAME_PREFIX LF_NAME_ROOT LF_STR(LF_PROTO_VERSION) "/"
#define LF_NAME_MAX 108

/* The marks below carry the version as one character. */
_Static_assert(LF_PROTO_VERSION > 0 && LF_PROTO_VERSION < 75, "the version is written as '0' + the version");

/* The MSS a fast-path client advertises in its SYN: says "my hello is
 * queued". The doorbell never carries data, so its MSS costs nothing;
 * firewall rules that clamp the MSS lower it, never to this. */
#define LF_HELLO_MSS 89

/* The claim's mark (bell.c): the server writes these bytes on the TCP
 * connection before closing it; the client's bell takes only them for the
 * claim. */
#define LF_CLAIM_MARK { 'L', 'F', 'c', 'l', 'a', 'i', 'm', '0' + LF_PROTO_VERSION }
#define LF_CLAIM_MARK_LEN 8

/* The first word of every stash message (stash.c): "LFS" and the version. */
#define LF_STASH_MAGIC (0x0053464cu | (uint32_t)('0' + LF_PROTO_VERSION) << 24)

/* The listener's shared page (listener.c): its memfd is named
 * LF_PAGE_NAME "<listener inode>", and it starts with LF_PAGE_MAGIC and
 * LF_PROTO_VERSION. */
#define LF_PAGE_MAGIC 0x6770464cu /* "LFpg", then the version */
#define LF_PAGE_NAME "loopfast:" LF_STR(LF_PROTO_VERSION) ":"

/* ---- addrmap.c: loopback endpoints and the abstract names that encode them */

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

bool lf__ep_from_sockaddr(struct lf_ep *ep, const struct sockaddr *sa, socklen_t len);
/* Writes ep as a sockaddr of the given family (v4 in v6 as v4-mapped). */
socklen_t lf__ep_to_sockaddr(const struct lf_ep *ep, int family, struct sockaddr_storage *ss);
bool lf__ep_is_loopback(const struct lf_ep *ep);
bool lf__ep_is_any(const struct lf_ep *ep);
bool lf__ep_equal(const struct lf_ep *a, const struct lf_ep *b);
int lf__ep_format(const struct lf_ep *ep, char *buf, size_t len); /* "127.0.0.1:80", "[::1]:80" */

/* The abstract names of the protocol (see docs/security.md):
 *   rendezvous of a TCP listener   "\0loopfast/<version>/L/<fam>/<listener inode>"
 *   stash of that listener         "\0loopfast/<version>/S/<fam>/<listener inode>"
 *   client end of a connection     "\0loopfast/<version>/C/<fam>/<caddr>/<cport>/<saddr>/<sport>/<nonce>"
 * where fam is the family of the listener, or of the client's TCP socket,
 * and the nonce (a random number per client process and a counter) keeps
 * the name unique when the kernel reuses an ephemeral port. Each returns
 * the sockaddr length. */
socklen_t lf__name_listener(struct sockaddr_un *sun, int family, unsigned long ino);
/* The rendezvous name protocol `version` gives the listener (the same
 * format since protocol 3). */
socklen_t lf__name_listener_of(struct sockaddr_un *sun, int version, int family, unsigned long ino);
socklen_t lf__name_stash(struct sockaddr_un *sun, int family, unsigned long ino);
/* A client name of kind "T" (same fields as "C") asks the server for the
 * shared-memory tier (docs/shm.md); protocol 6 and later. */
socklen_t lf__name_client_tier(struct sockaddr_un *sun, int family, const struct lf_ep *c, const struct lf_ep *s,
			       unsigned long nonce, bool shm);
/* Whether a name that parses as a client's asks for the shm tier. */
bool lf__name_asks_shm(const struct sockaddr_un *sun, socklen_t len);
socklen_t lf__name_client(struct sockaddr_un *sun, int family, const struct lf_ep *c,
			  const struct lf_ep *s, unsigned long nonce);
enum lf_name_kind { LF_NAME_NONE, LF_NAME_LISTENER, LF_NAME_CLIENT };
/* Parses an abstract name (never trusts it: any process can bind any free
 * name). Both kinds fill *family (of the listener, or of the client's TCP
 * socket); a listener name fills *ino; a client name fills the client
 * endpoint in *a and the server endpoint in *b. */
enum lf_name_kind lf__name_parse(const struct sockaddr_un *sun, socklen_t len, unsigned long *ino, int *family,
				 struct lf_ep *a, struct lf_ep *b);

/* ---- syn.c: the saved SYN's mark (peer input; fuzzed) */

/* 1: the SYN (IP header onwards, len bytes) carries MSS LF_HELLO_MSS; 0: it
 * does not; -1: too short or malformed to tell. */
int lf__syn_marked(const uint8_t *syn, size_t len);
/* The SYN's destination (the accepted socket's local end) into *ep: true if its headers hold it. */
bool lf__syn_local(const uint8_t *syn, size_t len, struct lf_ep *ep);

#endif
