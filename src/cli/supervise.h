/* What the three files of loopfast run's seccomp supervisor share
 * (docs/supervisor.md): supervise.c (the filter, the process model, the
 * notification loop, SOL_LOOPFAST and which sockets are opted in),
 * supervise_client.c (connect, the bells, the names),
 * supervise_server.c (listen, accept, the listeners it serves) and
 * supervise_sockopt.c (the other socket options). */
#ifndef LF_SUPERVISE_H
#define LF_SUPERVISE_H

#include <linux/seccomp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

extern bool sv_debug;
#define SV_DEBUG(...) do { if (sv_debug) { fprintf(stderr, "loopfast: supervisor: " __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* Tags of the notification loop's epoll events (the low bits: an index). */
#define SV_TAG_WATCH 0x10000u /* a client's bell (supervise_client.c) */
#define SV_TAG_PARK 0x20000u  /* a blocking accept waiting for a connection (supervise_server.c) */
#define SV_TAG_CONN 0x30000u  /* a connect whose handshake is in progress (supervise_client.c) */
#define SV_TAG_MASK 0xffff0000u

/* ---- supervise.c: talking to the kernel about a notification */

/* Answers the notification: err (<= 0), or let the kernel make the call
 * itself (cont). */
void sv_reply(int lfd, uint64_t id, int err, bool cont);
bool sv_valid(int lfd, uint64_t id);
bool sv_read(pid_t pid, uint64_t addr, void *buf, size_t len);
bool sv_write(pid_t pid, uint64_t addr, const void *buf, size_t len);
/* A copy of fd of the notification's thread (in this process,
 * close-on-exec), or -1; -1 too when the call is no longer waiting once
 * the thread's pidfd is open (its id reused). The thread's pidfd is kept
 * for its next calls; a caller that read the program's memory must still
 * check the notification (sv_valid) after its reads. */
int sv_grab(int lfd, const struct seccomp_notif *n, int fd);
/* The kernel's SO_DOMAIN of fd (past the library), or -1. */
int sv_domain(int fd);
/* Whether the supervisor may switch this socket of the program (before
 * its connect, or its listener): it must be in the supervisor's network
 * namespace (where the listener is looked up, the hello queued, the
 * rendezvous named), carry no option the fast path cannot keep (asked of
 * the kernel, or a key seen set), and be of the supervisor's own
 * uid (the sockets it makes and the rendezvous it serves carry the
 * supervisor's credentials; the creator's uid, as fstat and sock_diag
 * report it). Says once per uid why not. st: copy's fstat where the
 * caller has it (NULL: asked here). */
bool sv_may_switch(int copy, pid_t pid, const struct stat *st);
/* Whether the program wants the fast path for this socket: opted in with
 * SOL_LOOPFAST, or (whole-process mode) not opted out. */
bool sv_wanted(int copy);
/* Every socket inode the supervised tree holds, sorted (for the sweep);
 * returns how many, *out malloc'd (NULL when none). */
size_t sv_tree_inodes(unsigned long **out);
bool sv_has_inode(const unsigned long *tab, size_t n, unsigned long ino);
/* Whether a process of the tree holds socket inode ino. */
bool sv_tree_holds(unsigned long ino);
/* Lets go of what the tree no longer holds (supervise_server.c's
 * listeners: svs_sweep, and the opt-in choices). */
void sv_sweep(void);
/* Whether a signal is pending for thread tid that a handler of its
 * process catches and that it does not block (a held call answered
 * SV_ERESTARTSYS then lets the handler run). */
bool sv_handler_due(pid_t tid);
#define SV_ERESTARTSYS 512 /* the kernel's: restart, or EINTR without SA_RESTART */
/* Notes on copy, in the library, the SOL_SOCKET options the program set
 * on the socket (those that differ from a new TCP socket's), so that the
 * switch carries them to the Unix socket. */
void sv_note_options(int copy);
/* Whether process pid has the preload (it negotiates itself). */
bool sv_has_preload(pid_t pid);

/* ---- supervise_client.c */

void svc_connect(int lfd, int ep, const struct seccomp_notif *n);
void svc_name(int lfd, const struct seccomp_notif *n, bool peer);
void svc_watch_end(int ep, int i);
/* Connects held while their handshake goes on: one is ready (the loop's
 * epoll), whether any is held (then svs_tick-like looks: svc_tick ends
 * those past their deadline, or whose caller is gone). */
void svc_conn_ready(int lfd, int ep, int i);
bool svc_pending(void);
void svc_tick(int lfd, int ep);

/* ---- supervise_sockopt.c */

/* getsockopt, setsockopt (but SOL_LOOPFAST): trapped. */
void svo_opt(int lfd, const struct seccomp_notif *n);
/* Before the switch of copy (its connect, its listen): the options set on
 * it that the library did not see are set again through it. */
void svo_carry(int copy);
/* Whether a key (TCP_MD5SIG, TCP-AO: any set pins) was seen set on copy. */
bool svo_pinned(int copy);
/* The program's socket with inode from was switched to the one with
 * inode to (connect): its sets go with it. A connection accepted from
 * listener from (inode to) inherits the listener's. */
void svo_move(unsigned long from, unsigned long to);
/* The Unix socket with inode ino was put in the program on the fast
 * path (its options need not ask whether it is one). */
void svo_switched(unsigned long ino);
void svo_inherit(unsigned long from, unsigned long to);
/* How many sockets have sets kept; the sweep lets go of those the tree
 * no longer holds (inos: sorted). */
size_t svo_count(void);
void svo_sweep(const unsigned long *inos, size_t n);

/* ---- supervise_epoll.c */

/* Whether thread tid's process has its socket fd (copy: ours of it) in
 * one of its epoll sets (then its connect is left on plain TCP); false
 * for a Go binary, which registers after connect. */
bool sve_registered(pid_t tid, int fd, int copy);
/* A process of the tree called epoll_create or epoll_create1: the
 * cached epoll fds are looked for again. */
void sve_epoll_created(void);

/* ---- supervise_server.c */

void svs_listen(int lfd, const struct seccomp_notif *n);
void svs_accept(int lfd, int ep, const struct seccomp_notif *n);
void svs_bind(int lfd, const struct seccomp_notif *n);
void svs_park_ready(int lfd, int ep, int i);
/* Whether a listener copy is held (then the loop must look at the tree
 * now and then: svs_tick) and whether an accept is parked (svs_tick
 * looks at their signals). */
bool svs_listening(void);
bool svs_parked(void);
void svs_tick(int lfd, int ep);
/* Whether a listener held here is not among inos (then svs_sweep lets it go). */
bool svs_missing(const unsigned long *inos, size_t n);
void svs_sweep(const unsigned long *inos, size_t n);
/* Before a connect to port: lets go of a listener on it the tree no longer holds. */
void svs_check_port(unsigned port);
/* The listener this process serves for the socket with inode ino, as
 * the copy the library knows it by, or -1. */
int svs_listener(unsigned long ino);
/* A listener the program opted in after listen() (SOL_LOOPFAST): the
 * copy, with its rendezvous, is kept. */
void svs_keep(int copy);

#endif
