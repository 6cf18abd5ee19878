/* What the kernel says about a socket, never what loopfast says: the C
 * tests' proof that a connection took the fast path or stayed plain TCP.
 *
 * A fast-path pair is two AF_UNIX stream sockets, each the other's peer
 * (sock_diag's UNIX_DIAG_PEER names the peer's inode, what `ss -x` shows);
 * a plain-TCP pair is two TCP sockets whose addresses mirror each other
 * (inet_diag, found by inode, what `ss -t -e` shows). Every call is a raw
 * system call: loopfast interposes getsockopt, getsockname and getpeername
 * and answers them as TCP would for a fast-path socket. */
#ifndef LF_TEST_KERNEL_H
#define LF_TEST_KERNEL_H

#include <stdint.h>

/* One end of a TCP connection, as inet_diag reports it. */
struct k_ep {
	int family;       /* AF_INET or AF_INET6 */
	uint8_t addr[16]; /* an IPv4 address in its first 4 bytes */
	uint16_t port;    /* host order */
};

struct k_sock {
	int domain, type;        /* SO_DOMAIN, SO_TYPE */
	uint64_t ino;            /* the socket's inode (fstat) */
	uint64_t peer;           /* AF_UNIX: the peer's inode, 0 if none */
	int tcp_state;           /* TCP: its state (TCP_ESTABLISHED...), 0 if inet_diag lacks it */
	struct k_ep local, remote; /* TCP: its addresses */
};

/* Fills *k for fd; fails the test if the kernel will not answer. */
void k_sock(int fd, struct k_sock *k);

/* The kernel's verdict on c and s, two ends of one connection held by this
 * process: K_FAST, K_TCP, or K_NEITHER (anything else: not connected to
 * each other, one end Unix and the other TCP...). K_FAST and K_TCP are
 * the values lf_fast_path_active() gives for the same verdict. */
enum { K_NEITHER = -1, K_TCP = 0, K_FAST = 1 };
int k_path(int c, int s);

/* The sockets the proofs are made on: a listener on 127.0.0.1, an
 * ephemeral port (*port), opted in if optin (lf_enable_fast_path after
 * listen); a client connected to 127.0.0.1:port, opted in before its
 * connect if optin. Either fails the test on any error. */
int k_listener(int optin, int *port);
int k_client(int optin, int port);

#endif
