/* `loopfast status`: what status_scan.c gathers from the kernel, for
 * status.c to filter and print. */
#ifndef LF_CLI_STATUS_H
#define LF_CLI_STATUS_H

#include "cli.h"
#include "internal.h"

#include <sys/types.h>

#define ST_PIDS_MAX 16

struct st_sock {
	uint32_t ino, peer, uid; /* uid: the socket's owner as sock_diag says (has_uid) */
	bool has_uid;
	uint8_t state;
	struct sockaddr_un name;
	socklen_t namelen;
	int pid, fd;             /* the lowest pid holding it, and its fd there; -1 if none seen */
	int nholders, npids;     /* descriptors seen; distinct pids in pids[] */
	int pids[ST_PIDS_MAX];
};

struct st_proc {
	int pid;
	uint32_t uid;            /* effective uid, (uint32_t)-1 if unknown */
	char comm[32];
	bool have_stats;
	int stats_error;         /* errno of opening its page, if that failed */
	unsigned long long count[LF_NEVENTS];
	bool shown;              /* holds a row that is printed */
};

struct st_tcpl {
	uint32_t ino;
	struct lf_ep ep;
};

struct st_state {
	struct st_sock *socks;   /* sorted by inode */
	int nsocks, capsocks;
	struct st_tcpl *tls;
	int ntls, captls;
	struct st_proc *procs;   /* sorted by pid */
	int nprocs, capprocs;
	ino_t *pages;            /* stats pages already counted */
	int npages, cappages;
};
extern struct st_state st;

int st_dump_unix(void); /* 0 or -errno */
void st_dump_tcp_listeners(int family);
void st_scan_procs(void);
struct st_sock *st_by_ino(uint32_t ino);
struct st_proc *st_proc(int pid);
bool st_tcp_listener(unsigned long ino, struct lf_ep *ep);
struct st_sock *st_rendezvous_of(const struct st_sock *u);

#endif
