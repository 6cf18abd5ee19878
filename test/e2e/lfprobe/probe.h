/* lfprobe's shared helpers and its scenarios, one file per area:
 * sc_socket.c (one connection's socket behaviours), sc_connect.c (connect
 * when the handshake has to wait), sc_process.c (fork, exec, fd passing,
 * several processes on a listener), sc_stress.c (many connections, large
 * transfers, limits). probe.c has the helpers, the
 * scenario table and main. Nothing here knows about loopfast. */
#ifndef LFPROBE_H
#define LFPROBE_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/sockios.h>
#include <linux/unix_diag.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern int fam;          /* AF_INET or AF_INET6, from the command line */
extern const char *self; /* argv[0], for scenarios that exec themselves */

#define CHECK(c) do { if (!(c)) { out("FAIL %s:%d %s (errno %d %s)", __FILE__, __LINE__, #c, errno, strerror(errno)); exit(1); } } while (0)

const char *at_least(uint64_t t0, int ms);
void child_echo(int s);
void client_echo(int port);
void clients(int port, int n, const char *what);
int connect_to(int port);
void echo(int fd);
const char *ename(int e);
void expect_echo(int fd, const char *msg);
void expect_echo_pair(int c, int s);
pid_t fork_child(void);
void fpath(FILE *f, const char *who, int fd);
uint64_t now_us(void);
int listener(int *port);
int listener_opts(int *port, int reuseport);
int listen_socket(int port, int reuseport);
socklen_t loopback(struct sockaddr_storage *ss, int port);
void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pair(int *c, int *s);
void path(const char *who, int fd);
const char *path_of(int fd);
int port_of(int fd, int peer);
size_t read_full(int fd, void *buf, size_t n);
void serve_echo(int n);
void serve_until_quit(int l, int quit);
int wait_child(pid_t p);
void unwatch(void);
void watch(const char *what, int secs);
void write_all(int fd, const void *buf, size_t n);

/* Scenarios. */
void sc_backpressure(void);
void sc_bulk(void);
void sc_mmsg(void);
void sc_prefork_fd_limit(void);
void sc_fork_while_connecting(void);
void sc_close_range_fork(void);
void sc_churn(void);
void sc_connect_again(void);
void sc_connect_eintr(void);
void sc_connect_eintr_reconnect(void);
void sc_connect_full_epoll(void);
void sc_connect_full_poll(void);
void sc_connect_full_select(void);
void sc_connect_nonblock(void);
void sc_connect_refused(void);
void sc_connect_restart(void);
void sc_connect_sndtimeo(void);
void sc_dualstack(void);
void sc_dup(void);
void sc_epoll_before_connect(void);
void sc_fortify_pwait2(void);
void sc_exec(void);
void sc_exec_listener(void);
void sc_fd_limit(void);
void sc_fdleak(void);
void sc_fork_after_accept(void);
void sc_halfclose(void);
void sc_peer_closed(void);
void sc_ioctl(void);
void sc_kill_workers(void);
void sc_many(void);
void sc_msgflags(void);
void sc_names(void);
void sc_prefork(void);
void sc_readiness(void);
void sc_reuseport(void);
void sc_scm_rights(void);
void sc_sendfile_splice(void);
void sc_sigkill(void);
void sc_sockopts(void);
void sc_sockopts_before(void);
void sc_sockopt_table(void);
void sc_tcp_info(void);
void sc_sockopt_pin(void);
void sc_sockopt_shared(void);
void sc_listener_linger(void);
void sc_oob(void);
void sc_shut_rd(void);
void sc_rcvlowat(void);
void sc_stash_limit(void);
void sc_vectored(void);
void sc_first_write(void);

#endif
