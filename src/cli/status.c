/* loopfast status [--all | --user NAME] [--pid PID]: the fast-path
 * listeners and connections of this network namespace, and for each
 * process how many connections took the fast path and how many plain TCP,
 * and why -- all from kernel state (status_scan.c).
 *
 * Whose: by default the invoking user's processes (root: everyone's);
 * --all everyone's, --user one user's, --pid one process's. Every row
 * names its process, or says in words why it cannot: another user's
 * process (only root can read its descriptors), a connection that its
 * server has not accepted yet, or a socket no process holds.
 * The JSON (--json) is documented in loopfast(1); fields are only added. */
#include "status.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { EV_FAST, EV_TCP, EV_REFUSED, EV_ORPHANED };

/* Names of the counts (enum lf_event), for JSON and for people. */
static const struct {
	const char *key, *words;
	int group;
} events[] = {
	[LF_EV_FAST_CLIENT] = { "fast_client", "client", EV_FAST },
	[LF_EV_FAST_SERVER] = { "fast_server", "server", EV_FAST },
	[LF_EV_NOT_LOOPBACK] = { "not_loopback", "not loopback", EV_TCP },
	[LF_EV_NO_LISTENER] = { "no_listener", "no listener", EV_TCP },
	[LF_EV_NO_RENDEZVOUS] = { "no_rendezvous", "peer not opted in", EV_TCP },
	[LF_EV_NOT_OWNER] = { "not_owner", "rendezvous not the listener owner's", EV_TCP },
	[LF_EV_BUSY] = { "busy", "rendezvous full", EV_TCP },
	[LF_EV_FAILED] = { "failed", "setup failed", EV_TCP },
	[LF_EV_EXCLUDED] = { "excluded", "excluded", EV_TCP },
	[LF_EV_PLAIN_PEER] = { "plain_peer", "client not opted in", EV_TCP },
	[LF_EV_UNVOUCHED] = { "unvouched", "unvouched", EV_REFUSED },
	[LF_EV_DROPPED] = { "dropped", "over their uid's share", EV_REFUSED },
	[LF_EV_ORPHANED] = { "orphaned", "client", EV_ORPHANED },
};
_Static_assert(sizeof(events) / sizeof(events[0]) == LF_NEVENTS, "every lf_event needs a name in status.c");

struct row {
	struct st_sock *u;
	bool listener;
	const char *role;
	struct lf_ep a, b;      /* listener: a = address; connection: local, peer */
	uint32_t uid;           /* whose it is; (uint32_t)-1 unknown */
	int pid, fd;            /* -1 when no process can be named */
	int owner_pid;          /* for scope: the holder, or the listener's for a queued connection */
	char why[96];           /* why pid is -1 */
};

static struct {
	bool all, root;
	bool by_uid;
	uint32_t uid;
	int pid;                /* 0: any */
} scope;

static struct row *rows;
static int nrows, caprows, not_shown;
static bool other_users_seen;

static const char *user_name(uint32_t uid)
{
	static uint32_t last = (uint32_t)-1;
	static char name[64];

	if (uid == (uint32_t)-1)
		return NULL;
	if (uid != last) {
		struct passwd *pw = getpwuid(uid);
		snprintf(name, sizeof(name), "%s", pw ? pw->pw_name : "");
		last = uid;
	}
	return name[0] ? name : NULL;
}

static void json_str(const char *s)
{
	if (!s) {
		printf("null");
		return;
	}
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static bool in_scope(uint32_t uid, const struct st_sock *u, int owner_pid)
{
	if (scope.pid) {
		bool held = owner_pid == scope.pid;
		for (int i = 0; u && i < u->npids; i++)
			held |= u->pids[i] == scope.pid;
		if (!held)
			return false;
	}
	return !scope.by_uid || uid == scope.uid;
}

/* Who a socket is, when no process we can read holds it. */
static void unowned(struct row *r, bool server_end)
{
	struct st_sock *u = r->u, *rdv;
	uint32_t me = getuid();

	r->uid = u->has_uid ? u->uid : (uint32_t)-1;
	if (server_end && (rdv = st_rendezvous_of(u))) {
		/* Not accepted yet (in the rendezvous's queue, or stashed by
		 * another accept): it is the listener's. Its own uid is the
		 * kernel's placeholder (0) until an accept takes it. */
		struct st_proc *p = st_proc(rdv->pid);
		r->uid = p ? p->uid : rdv->has_uid ? rdv->uid : r->uid;
		if (p) {
			r->owner_pid = p->pid;
			snprintf(r->why, sizeof(r->why), "not accepted yet (queued at the listener of pid %d)", p->pid);
			return;
		}
	}
	if (!scope.root && r->uid != me) {
		snprintf(r->why, sizeof(r->why), "another user's process");
	} else if (server_end) {
		snprintf(r->why, sizeof(r->why), "not accepted yet");
	} else {
		snprintf(r->why, sizeof(r->why), "held by no process that can be read (in flight, or exiting)");
	}
}

static void add_row(struct row *r)
{
	if (r->pid > 0) {
		struct st_proc *p = st_proc(r->pid);
		r->uid = p ? p->uid : r->u->has_uid ? r->u->uid : (uint32_t)-1;
		r->owner_pid = r->pid;
	}
	if (!in_scope(r->uid, r->u, r->owner_pid)) {
		not_shown += scope.by_uid && !scope.pid;
		return;
	}
	other_users_seen |= r->pid < 0 && !strcmp(r->why, "another user's process");
	for (int i = 0; i < r->u->npids; i++) {
		struct st_proc *p = st_proc(r->u->pids[i]);
		if (p)
			p->shown = true;
	}
	if (nrows == caprows) {
		caprows = caprows ? caprows * 2 : 64;
		if (!(rows = realloc(rows, (size_t)caprows * sizeof(*rows)))) {
			fprintf(stderr, "loopfast: status: out of memory\n");
			exit(2);
		}
	}
	rows[nrows++] = *r;
}

static void collect(void)
{
	unsigned long lino;
	int family;
	struct lf_ep a, b, c, s;

	for (int i = 0; i < st.nsocks; i++) {
		struct st_sock *u = &st.socks[i];
		struct row r = { .u = u, .listener = true, .pid = u->pid, .fd = u->fd, .owner_pid = -1 };
		if (u->state != 10 /* listening */ ||
		    lf__name_parse(&u->name, u->namelen, &lino, &family, &a, &b) != LF_NAME_LISTENER ||
		    !st_tcp_listener(lino, &r.a))
			continue; /* not a rendezvous, or its TCP listener is gone */
		if (r.pid < 0)
			unowned(&r, false);
		add_row(&r);
	}
	for (int i = 0; i < st.nsocks; i++) {
		struct st_sock *u = &st.socks[i], *peer;
		struct row r = { .u = u, .pid = u->pid, .fd = u->fd, .owner_pid = -1 };
		if (u->state != 1 /* established */)
			continue;
		if (lf__name_parse(&u->name, u->namelen, &lino, &family, &a, &b) == LF_NAME_CLIENT) {
			r.role = "client";
			r.a = a;
			r.b = b;
		} else if ((peer = st_by_ino(u->peer)) &&
			   lf__name_parse(&peer->name, peer->namelen, &lino, &family, &c, &s) == LF_NAME_CLIENT &&
			   lf__name_parse(&u->name, u->namelen, &lino, &family, &a, &b) == LF_NAME_LISTENER) {
			r.role = "server";
			r.a = s;
			r.b = c;
		} else {
			continue;
		}
		if (r.pid < 0)
			unowned(&r, !strcmp(r.role, "server"));
		add_row(&r);
	}
}

static unsigned long long group_sum(const struct st_proc *p, int group)
{
	unsigned long long n = 0;

	for (int i = 0; i < LF_NEVENTS; i++)
		if (events[i].group == group)
			n += p->count[i];
	return n;
}

static bool proc_listed(const struct st_proc *p)
{
	if (scope.pid)
		return p->pid == scope.pid;
	if (!p->have_stats && !p->shown && !p->stats_error)
		return false;
	return !scope.by_uid || p->uid == scope.uid;
}

static void print_ep(const char *key, const struct lf_ep *ep, bool last)
{
	char buf[80];

	lf__ep_format(ep, buf, sizeof(buf));
	printf(lf_cli_json ? "\"%s\": \"%s\"%s" : "%s %-24s%s", key, buf, last ? "" : lf_cli_json ? ", " : " ");
}

/* The fields every row has after its own: whose it is. */
static void print_owner(const struct row *r)
{
	struct st_proc *p = st_proc(r->pid);

	if (lf_cli_json) {
		printf(", \"uid\": ");
		if (r->uid == (uint32_t)-1)
			printf("null");
		else
			printf("%u", r->uid);
		printf(", \"user\": ");
		json_str(user_name(r->uid));
		printf(", \"comm\": ");
		json_str(p ? p->comm : NULL);
		printf(", \"pids\": [");
		for (int i = 0; i < r->u->npids; i++)
			printf("%s%d", i ? ", " : "", r->u->pids[i]);
		printf("], \"pid_unknown\": ");
		json_str(r->pid > 0 ? NULL : r->why);
		printf("}");
		return;
	}
	const char *name = user_name(r->uid);
	if (r->pid > 0) {
		printf(" %s", p && p->comm[0] ? p->comm : "?");
		if (name)
			printf(" (%s)", name);
		else if (r->uid != (uint32_t)-1)
			printf(" (uid %u)", r->uid);
		if (r->u->npids > 1)
			printf(", shared with %d other process%s", r->u->npids - 1, r->u->npids > 2 ? "es" : "");
	} else {
		printf(" pid unknown: %s", r->why);
		if (name)
			printf(" (%s)", name);
		else if (r->uid != (uint32_t)-1)
			printf(" (uid %u)", r->uid);
	}
	printf("\n");
}

static void print_pidfd(const struct row *r)
{
	if (lf_cli_json)
		printf("{\"pid\": %d, \"fd\": %d, ", r->pid > 0 ? r->pid : -1, r->pid > 0 ? r->fd : -1);
	else if (r->pid > 0)
		printf("  pid %-7d fd %-5d ", r->pid, r->fd);
	else
		printf("  pid %-7s fd %-5s ", "unknown", "-");
}

static void print_proc(const struct st_proc *p, bool first)
{
	const char *name = user_name(p->uid);

	if (lf_cli_json) {
		printf("%s{\"pid\": %d, \"uid\": ", first ? "" : ", ", p->pid);
		if (p->uid == (uint32_t)-1)
			printf("null");
		else
			printf("%u", p->uid);
		printf(", \"user\": ");
		json_str(name);
		printf(", \"comm\": ");
		json_str(p->comm);
		printf(", \"fast\": %llu, \"tcp\": %llu, \"refused\": %llu, \"counts\": {", group_sum(p, EV_FAST),
		       group_sum(p, EV_TCP), group_sum(p, EV_REFUSED));
		for (int i = 0; i < LF_NEVENTS; i++)
			printf("%s\"%s\": %llu", i ? ", " : "", events[i].key, p->count[i]);
		printf("}, \"counts_error\": ");
		json_str(p->stats_error ? strerror(p->stats_error) : NULL);
		printf("}");
		return;
	}
	printf("  pid %-7d %s", p->pid, p->comm[0] ? p->comm : "?");
	if (name)
		printf(" (%s)", name);
	if (p->stats_error) {
		printf(": counts unreadable (%s)\n", strerror(p->stats_error));
		return;
	}
	if (!p->have_stats) {
		printf(": no connection counted yet\n");
		return;
	}
	for (int g = EV_FAST; g <= EV_ORPHANED; g++) {
		static const char *const head[] = { "fast path", "plain TCP", "hellos refused",
						    "fast path ended unclaimed by the server" };
		unsigned long long n = group_sum(p, g);
		if (g >= EV_REFUSED && !n)
			continue;
		printf("%s %s %llu", g == EV_FAST ? ":" : ";", head[g], n);
		const char *sep = " (";
		for (int i = 0; i < LF_NEVENTS; i++)
			if (events[i].group == g && p->count[i]) {
				printf("%s%s %llu", sep, events[i].words, p->count[i]);
				sep = ", ";
			}
		if (strcmp(sep, " ("))
			printf(")");
	}
	printf("\n");
}

static int usage_error(const char *what, const char *arg)
{
	return lf_cli_error("status: %s '%s' (usage: loopfast [--json] status [--all | --user NAME] [--pid PID])", what,
			    arg);
}

static int parse_args(int argc, char **argv)
{
	unsigned long long v;
	const char *user = NULL;

	scope.root = geteuid() == 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			lf_cli_json = true;
		} else if (!strcmp(argv[i], "--all")) {
			scope.all = true;
		} else if (!strcmp(argv[i], "--pid")) {
			if (++i == argc)
				return lf_cli_error("status: --pid needs a process id");
			if (lf_cli_parse_uint("status --pid", argv[i], 1, INT_MAX, &v))
				return 2;
			scope.pid = (int)v;
		} else if (!strcmp(argv[i], "--user")) {
			if (++i == argc)
				return lf_cli_error("status: --user needs a user name or uid");
			user = argv[i];
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: loopfast [--json] status [--all | --user NAME] [--pid PID]\n");
			exit(0);
		} else {
			return usage_error("unknown argument", argv[i]);
		}
	}
	if (scope.all && user)
		return lf_cli_error("status: --all and --user cannot be used together");
	if (user) {
		struct passwd *pw = getpwnam(user);
		char *end;
		errno = 0;
		unsigned long n = strtoul(user, &end, 10);
		if (pw)
			scope.uid = pw->pw_uid;
		else if (*user && !*end && !errno && n < UINT32_MAX && user[0] != '-')
			scope.uid = (uint32_t)n;
		else
			return lf_cli_error("status: no user '%s' (--user takes a user name or a uid)", user);
		scope.by_uid = true;
	} else if (!scope.all && !scope.pid && !scope.root) {
		scope.by_uid = true; /* the invoking user's own */
		scope.uid = getuid();
	}
	if (scope.pid) {
		char path[32];
		snprintf(path, sizeof(path), "/proc/%d", scope.pid);
		if (access(path, F_OK))
			return lf_cli_error("status: no process %d", scope.pid);
	}
	return 0;
}

int cmd_status(int argc, char **argv)
{
	int r;

	if ((r = parse_args(argc, argv)))
		return r;
	if ((r = st_dump_unix()) < 0)
		return lf_cli_error("status: cannot list Unix sockets (sock_diag): %s", strerror(-r));
	st_scan_procs();
	st_dump_tcp_listeners(AF_INET);
	st_dump_tcp_listeners(AF_INET6);
	collect();

	const char *who = scope.pid ? "pid" : scope.all || (!scope.by_uid && scope.root) ? "all" :
		getuid() == scope.uid ? "own" : "user";
	char pidnote[160] = "";
	struct st_proc *target = st_proc(scope.pid);
	if (scope.pid && !target) {
		char path[32];
		snprintf(path, sizeof(path), "/proc/%d/fd", scope.pid);
		if (access(path, R_OK))
			snprintf(pidnote, sizeof(pidnote),
				 "pid %d is another user's process: only root can read its sockets and counts", scope.pid);
		else
			snprintf(pidnote, sizeof(pidnote),
				 "pid %d holds no fast-path socket and has no counts: not under loopfast, or no connection yet",
				 scope.pid);
	}

	if (lf_cli_json) {
		printf("{\"scope\": {\"who\": \"%s\", \"uid\": ", who);
		if (scope.by_uid)
			printf("%u", scope.uid);
		else
			printf("null");
		printf(", \"user\": ");
		json_str(scope.by_uid ? user_name(scope.uid) : NULL);
		printf(", \"pid\": ");
		if (scope.pid)
			printf("%d", scope.pid);
		else
			printf("null");
		printf("}, \"listeners\": [");
	} else {
		printf("LISTENERS\n");
	}
	int n = 0;
	for (int i = 0; i < nrows; i++) {
		if (!rows[i].listener)
			continue;
		printf(lf_cli_json && n++ ? ", " : "");
		print_pidfd(&rows[i]);
		print_ep("address", &rows[i].a, true);
		print_owner(&rows[i]);
	}
	printf(lf_cli_json ? "], \"connections\": [" : "CONNECTIONS\n");
	n = 0;
	for (int i = 0; i < nrows; i++) {
		if (rows[i].listener)
			continue;
		printf(lf_cli_json && n++ ? ", " : "");
		print_pidfd(&rows[i]);
		if (lf_cli_json)
			printf("\"role\": \"%s\", ", rows[i].role);
		else
			printf("%-7s ", rows[i].role);
		print_ep("local", &rows[i].a, false);
		print_ep("peer", &rows[i].b, true);
		print_owner(&rows[i]);
	}
	printf(lf_cli_json ? "], \"processes\": [" :
			     "PROCESSES (connections since each started: fast path, plain TCP and why)\n");
	n = 0;
	for (int i = 0; i < st.nprocs; i++)
		if (proc_listed(&st.procs[i]))
			print_proc(&st.procs[i], n++ == 0);
	if (lf_cli_json) {
		printf("], \"not_shown\": %d, \"notes\": [", not_shown);
		n = 0;
		if (pidnote[0]) {
			json_str(pidnote);
			n++;
		}
		if (other_users_seen) {
			printf(n++ ? ", " : "");
			json_str("other users' processes are not named: only root can read their descriptors");
		}
		printf("]}\n");
	} else {
		if (not_shown)
			printf("(%d row%s of other users' processes not shown: --all shows them)\n", not_shown,
			       not_shown > 1 ? "s" : "");
		if (pidnote[0])
			printf("(%s)\n", pidnote);
		if (other_users_seen)
			printf("(other users' processes are not named: only root can read their descriptors)\n");
	}
	free(rows);
	return 0;
}
