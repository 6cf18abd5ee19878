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

/* Opts a TCP socket in. Returns 0, -EOPNOTSUPP (not TCP over IPv4/IPv6),
 * -EISCONN (already connected), -EBADF or -ENOTSOCK. */
int lf_enable_fast_path(int fd);

/* Returns 1 if the connected socket uses the fast path, 0 if plain TCP, or -errno. */
int lf_fast_path_active(int fd);

/* Sets the user-space busy-poll budget (microseconds, 0 = off) of a socket.
 * Returns 0 or -errno. */
int lf_set_spin(int fd, unsigned usec);

/* Returns a static description of a (negative or positive) errno value. */
const char *lf_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
