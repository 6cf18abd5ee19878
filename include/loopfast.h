/* loopfast: a TCP loopback fast path for Linux.
 *
 * Both ends of a loopback TCP connection opt in (the client before connect,
 * the server on the listening socket before accept); the connection then
 * carries its bytes over a shorter path while keeping TCP socket semantics.
 * Anything that prevents the fast path yields plain TCP, silently.
 *
 * Functions return 0 or a non-negative value on success and -errno on error.
 */
#ifndef LOOPFAST_H
#define LOOPFAST_H

#ifdef __cplusplus
extern "C" {
#endif

/* loopfast's version, written here only: CMakeLists.txt reads it for the
 * project's version (the libraries' file names, the pkg-config files) and
 * `loopfast --version` prints it. */
#define LF_VERSION_MAJOR 0
#define LF_VERSION_MINOR 1
#define LF_VERSION_PATCH 0

/* Opts a TCP socket in. Returns 0, -EOPNOTSUPP (not TCP over IPv4/IPv6, or
 * an option the fast path cannot keep, such as SO_ZEROCOPY, was set on it),
 * -EISCONN (connected, or its connect in progress), -EBADF or -ENOTSOCK. */
int lf_enable_fast_path(int fd);

/* Returns 1 if the connected socket uses the fast path, 0 if plain TCP, or -errno. */
int lf_fast_path_active(int fd);

/* Sets the user-space busy-poll budget (microseconds, 0 = off) of a socket.
 * Returns 0 or -errno. */
int lf_set_spin(int fd, unsigned usec);

/* The data tier of a fast-path connection: LF_TIER_UDS (the Unix stream,
 * the default) or LF_TIER_SHM (shared-memory rings, loopfast(3) and
 * docs/shm.md). Asked before connect, or on a listener before accept
 * (accepted sockets inherit it); a connection takes the shm tier only when
 * both ends asked. Returns 0, -EINVAL, -EISCONN (its path is chosen), or
 * -errno. */
#define LF_TIER_UDS 0
#define LF_TIER_SHM 1
int lf_set_tier(int fd, int tier);

/* The same calls as a socket option, for programs that cannot call C (a
 * private level the kernel answers with ENOPROTOOPT, so a program run
 * without loopfast gets that error and carries on over TCP). The value is
 * an int. loopfast(3) says what each answers.
 *   setsockopt LOOPFAST_FAST_PATH 1: lf_enable_fast_path (same errors);
 *     0: opt out (stays plain TCP, also in whole-process mode), before
 *     connect or listen, else EISCONN.
 *   getsockopt LOOPFAST_FAST_PATH: connected: 1 fast path, 0 plain TCP;
 *     listener: 1 if it serves the fast path; unconnected: 1 if opted in.
 *   LOOPFAST_SPIN: lf_set_spin's budget in microseconds (set and get). */
#define SOL_LOOPFAST 0x4c46
#define LOOPFAST_FAST_PATH 1
#define LOOPFAST_SPIN 2
/*   LOOPFAST_TIER: lf_set_tier's tier (set); get: LF_TIER_SHM when the
 *     connection holds the rings (both ends asked; a client waits for the
 *     server's answer: EAGAIN when non-blocking), or, unconnected, asked
 *     for them; else LF_TIER_UDS (plain TCP too). */
#define LOOPFAST_TIER 3

/* Returns a static description of a (negative or positive) errno value. */
const char *lf_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
