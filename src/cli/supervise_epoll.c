/* loopfast run's seccomp supervisor: whether the program has put a socket
 * in one of its epoll sets before its connect (docs/supervisor.md,
 * "Options and epoll"). The switch replaces the program's fd with the
 * Unix socket (NOTIF_ADDFD with SETFD); a registration made before it
 * stays on the TCP socket's file, which goes away, so the program would
 * never hear of the connection's data. Such a socket is left on plain
 * TCP. An accepted connection is a new file, registered after accept:
 * nothing to look for there.
 *
 * How it is seen: the program's epoll descriptors are those whose
 * /proc/TID/fd link is "anon_inode:[eventpoll]", and the kernel says
 * whether one holds the socket under its fd number (kcmp's
 * KCMP_EPOLL_TFD; without kcmp, the epoll's fdinfo, which lists its
 * targets: "tfd: N events: ... ino:HEX sdev:..."). A dup of the socket
 * registered under another number is not looked for where kcmp is used.
 *
 * What it costs, per connect: a stat of /proc/TID/exe (which binary the
 * thread runs now: an exec changes it). A Go binary (its build-info
 * section, as `loopfast run` picks the supervisor, cached per binary)
 * is not looked at further: the Go runtime registers a socket with its
 * netpoller after connect. For any other, the thread's epoll fd numbers
 * are cached, found by a scan of /proc/TID/fd (a readlink per fd) made
 * once per thread and binary, and again after any process of the tree
 * created an epoll (epoll_create and epoll_create1 are trapped to count
 * them: rare calls, made once by an event loop) or when a cached one is
 * no longer an epoll; then per connect one readlink and one kcmp per
 * epoll fd (measured in docs/supervisor.md). Not seen without a scan: an epoll fd that came by dup or
 * SCM_RIGHTS into a thread already scanned, while its original stays open
 * elsewhere. */
#include "cli.h"
#include "supervise.h"

#include <dirent.h>
#include <errno.h>
#include <linux/kcmp.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned long generation = 1; /* epoll_create calls seen in the tree */

void sve_epoll_created(void)
{
	generation++;
}

/* ---- Go or not, per binary */

#define MAX_BINARIES 32
static struct binary {
	dev_t dev;
	ino_t ino;
	bool go;
} binaries[MAX_BINARIES];
static unsigned nbinaries;

static bool is_go(const char *exe, const struct stat *st)
{
	for (unsigned i = 0; i < nbinaries && i < MAX_BINARIES; i++)
		if (binaries[i].dev == st->st_dev && binaries[i].ino == st->st_ino)
			return binaries[i].go;
	const char *why = lf_cli_supervise_why(exe);
	bool go = why && !strcmp(why, "a Go binary");
	binaries[nbinaries++ % MAX_BINARIES] = (struct binary){ st->st_dev, st->st_ino, go };
	return go;
}

/* ---- each thread's epoll fds */

#define MAX_THREADS 64
#define MAX_EPFDS 16
static struct thread {
	pid_t tid;
	dev_t dev;
	ino_t ino; /* the binary it ran at the scan */
	unsigned long generation;
	int nep; /* -1: more than MAX_EPFDS, scan each time */
	int ep[MAX_EPFDS];
} threads[MAX_THREADS];
static unsigned nthreads;

static bool is_epoll(int dir, const char *name)
{
	static const char want[] = "anon_inode:[eventpoll]";
	char l[sizeof(want)];
	ssize_t k = readlinkat(dir, name, l, sizeof(l));
	return k == (ssize_t)sizeof(want) - 1 && !memcmp(l, want, sizeof(want) - 1);
}

/* The epoll fds of tid, into t (nep -1 if more than it holds); false when
 * /proc/TID/fd cannot be read. */
static bool scan(pid_t tid, struct thread *t)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/fd", tid);
	DIR *d = opendir(p);
	if (!d)
		return false;
	t->nep = 0;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.' && is_epoll(dirfd(d), e->d_name)) {
			if (t->nep < 0 || t->nep == MAX_EPFDS)
				t->nep = -1;
			else
				t->ep[t->nep++] = atoi(e->d_name);
		}
	closedir(d);
	return true;
}

/* Whether file path holds pat (read in pieces: an epoll with thousands
 * of targets has a long fdinfo). */
static bool file_has(const char *path, const char *pat)
{
	char buf[8192];
	size_t keep = 0, pl = strlen(pat);
	bool has = false;
	int f = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t k;

	while (f >= 0 && !has && (k = read(f, buf + keep, sizeof(buf) - 1 - keep)) > 0) {
		buf[keep + (size_t)k] = 0;
		has = strstr(buf, pat) != NULL;
		size_t len = keep + (size_t)k;
		keep = len < pl ? len : pl; /* a match across two reads */
		memmove(buf, buf + len - keep, keep);
	}
	if (f >= 0)
		close(f);
	return has;
}

/* Whether epoll fd ep of tid holds the file at fd: the kernel's
 * kcmp(KCMP_EPOLL_TFD) (a look through the epoll's targets, about 1 µs
 * for a few, 14 µs for a thousand here); where the kernel has no kcmp,
 * ep's fdinfo searched for the socket's inode (pat; 850 µs for a
 * thousand targets). */
static bool registered_in(pid_t tid, int ep, int fd, const char *pat)
{
	static bool no_kcmp;
	char p[64];

	if (!no_kcmp) {
		struct kcmp_epoll_slot slot = { (uint32_t)ep, (uint32_t)fd, 0 };
		long r = syscall(SYS_kcmp, tid, tid, KCMP_EPOLL_TFD, fd, &slot);
		if (r >= 0 || (errno != ENOSYS && errno != EOPNOTSUPP))
			return r == 0;
		no_kcmp = true;
	}
	snprintf(p, sizeof(p), "/proc/%d/fdinfo/%d", tid, ep);
	return file_has(p, pat);
}

bool sve_registered(pid_t tid, int fd, int copy)
{
	char exe[64], pat[48], p[64], name[16];
	struct stat bin, sock;

	snprintf(exe, sizeof(exe), "/proc/%d/exe", tid);
	if (stat(exe, &bin) || is_go(exe, &bin) || fstat(copy, &sock))
		return false;
	snprintf(pat, sizeof(pat), " ino:%lx sdev:", (unsigned long)sock.st_ino);

	struct thread *t = NULL;
	for (unsigned i = 0; i < MAX_THREADS && !t; i++)
		if (threads[i].tid == tid)
			t = &threads[i];
	if (!t)
		*(t = &threads[nthreads++ % MAX_THREADS]) = (struct thread){ .tid = tid };
	bool fresh = t->generation == generation && t->dev == bin.st_dev && t->ino == bin.st_ino;

	snprintf(p, sizeof(p), "/proc/%d/fd", tid);
	int dir = fresh && t->nep > 0 ? open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	for (int i = 0; fresh && i < t->nep; i++) {
		snprintf(name, sizeof(name), "%d", t->ep[i]);
		fresh = dir >= 0 && is_epoll(dir, name);
	}
	if (dir >= 0)
		close(dir);
	if (!fresh) {
		if (!scan(tid, t)) {
			t->tid = 0;
			return false;
		}
		t->generation = generation;
		t->dev = bin.st_dev;
		t->ino = bin.st_ino;
	}
	if (t->nep < 0) { /* too many to cache: each one's fdinfo, by the scan's list */
		DIR *d = opendir(p);
		bool has = false;
		for (struct dirent *e; d && !has && (e = readdir(d));)
			has = e->d_name[0] != '.' && is_epoll(dirfd(d), e->d_name) && registered_in(tid, atoi(e->d_name), fd, pat);
		if (d)
			closedir(d);
		return has;
	}
	for (int i = 0; i < t->nep; i++)
		if (registered_in(tid, t->ep[i], fd, pat))
			return true;
	return false;
}
