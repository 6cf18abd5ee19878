/* loopfast run [--per-socket] [--spin-us N] [--tier shm|uds] [--exclude LIST] [--mode preload|seccomp]
 *              [--notify-mainpid] [--] PROG [ARGS...]
 *
 * Runs PROG with the interposer preloaded and every loopback TCP socket
 * opted in (LOOPFAST_ENABLE=1); children inherit the environment. With
 * --per-socket (LOOPFAST_ENABLE=per-socket) nothing is opted in by
 * itself: only the sockets the program opts in (the SOL_LOOPFAST option,
 * lf_enable_fast_path) take the fast path.
 * --exclude adds to LOOPFAST_EXCLUDE (listeners and destinations that stay
 * on plain TCP), checked here so that a typo is an error, not a warning
 * from every process of the tree.
 * A static binary or a Go binary (which makes its socket calls itself)
 * runs under the seccomp supervisor instead (supervise.c); --mode
 * (--supervise is --mode seccomp) chooses either way. Under the supervisor
 * PROG is a child of this process; --notify-mainpid tells systemd so
 * (NOTIFY_SOCKET, MAINPID=). Under the preload PROG is exec'd here: it has
 * this process's PID already, and the option changes nothing. */
#include "cli.h"
#include "internal.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *find_preload(void)
{
	static char path[PATH_MAX];
	static const char *rel[] = { "", "/../lib", "/../lib64", "/../lib/x86_64-linux-gnu" };
	const char *env = getenv("LOOPFAST_PRELOAD");

	if (env && *env)
		return access(env, R_OK) == 0 ? env : NULL;
	for (unsigned i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(path, sizeof(path), "%s%s/libloopfast-preload.so", lf_cli_selfdir(), rel[i]);
		if (access(path, R_OK) == 0)
			return path;
	}
	return NULL;
}

static bool find_in_path(const char *prog, char *out, size_t len)
{
	if (strchr(prog, '/')) {
		snprintf(out, len, "%s", prog);
		return access(out, X_OK) == 0;
	}
	const char *p = getenv("PATH");
	char buf[PATH_MAX * 4];
	snprintf(buf, sizeof(buf), "%s", p && *p ? p : "/usr/local/bin:/usr/bin:/bin");
	for (char *save = NULL, *dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, len, "%s/%s", *dir ? dir : ".", prog);
		if (access(out, X_OK) == 0)
			return true;
	}
	return false;
}

/* A dynamically linked ELF executable has a PT_INTERP program header;
 * scripts (#!) run an interpreter that usually is. */
static bool is_static_elf(const char *path)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	bool is_static = false;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	if (pread(fd, &eh, sizeof(eh), 0) == sizeof(eh) && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
	    eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_type == ET_EXEC) {
		is_static = true;
		for (int i = 0; i < eh.e_phnum; i++) {
			if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (Elf64_Off)i * eh.e_phentsize)) != sizeof(ph))
				break;
			if (ph.p_type == PT_INTERP || ph.p_type == PT_DYNAMIC) {
				is_static = false;
				break;
			}
		}
	}
	close(fd);
	return is_static;
}

/* Adds to what the environment already excludes (a nested run). */
static int add_exclude(const char *exclude)
{
	const char *had = getenv("LOOPFAST_EXCLUDE");
	char *all;
	if (asprintf(&all, "%s%s%s", had && *had ? had : "", had && *had ? "," : "", exclude) < 0)
		return -1;
	setenv("LOOPFAST_EXCLUDE", all, 1);
	return 0;
}

int cmd_run(int argc, char **argv)
{
	const char *spin = NULL, *lib, *mode = "1", *force = NULL, *tier = NULL;
	char path[PATH_MAX], *end, *exclude = NULL;
	bool mainpid = false;
	int i = 1;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		} else if (!strcmp(argv[i], "--per-socket")) {
			mode = "per-socket";
		} else if (!strcmp(argv[i], "--spin-us")) {
			if (++i == argc)
				return lf_cli_error("--spin-us needs a number of microseconds");
			errno = 0;
			unsigned long v = strtoul(argv[i], &end, 10);
			if (errno || *end || !*argv[i] || argv[i][0] == '-' || v > 1000000)
				return lf_cli_error("--spin-us takes microseconds from 0 to 1000000, not '%s'", argv[i]);
			spin = argv[i];
		} else if (!strcmp(argv[i], "--tier")) {
			if (++i == argc || (strcmp(argv[i], "shm") && strcmp(argv[i], "uds")))
				return lf_cli_error("--tier takes shm or uds");
			tier = argv[i];
		} else if (!strcmp(argv[i], "--exclude")) {
			struct lf_ep eps[LF_EXCLUDE_MAX];
			struct lf_exclude_err err;
			char *more;
			if (++i == argc)
				return lf_cli_error("--exclude needs PORT or ADDR:PORT (comma-separated), e.g. --exclude 6379,127.0.0.1:8080");
			int n = lf__exclude_parse(argv[i], eps, LF_EXCLUDE_MAX, &err);
			if (err.nbad)
				return lf_cli_error("--exclude: '%s' is not PORT, ADDR:PORT or [ADDR6]:PORT: %s", err.entry, err.why);
			if (n == 0)
				return lf_cli_error("--exclude needs PORT or ADDR:PORT (comma-separated), not '%s'", argv[i]);
			if (asprintf(&more, "%s%s%s", exclude ? exclude : "", exclude ? "," : "", argv[i]) < 0)
				return lf_cli_error("out of memory");
			free(exclude);
			exclude = more;
		} else if (!strcmp(argv[i], "--notify-mainpid")) {
			mainpid = true;
		} else if (!strcmp(argv[i], "--supervise")) {
			force = "seccomp";
		} else if (!strcmp(argv[i], "--mode")) {
			if (++i == argc || (strcmp(argv[i], "preload") && strcmp(argv[i], "seccomp")))
				return lf_cli_error("--mode takes preload or seccomp");
			force = argv[i];
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: loopfast run [--per-socket] [--spin-us N] [--tier shm|uds] [--exclude PORT|ADDR:PORT[,...]] [--mode preload|seccomp | --supervise] [--notify-mainpid] [--] PROG [ARGS...]\n");
			return 0;
		} else {
			return lf_cli_error("run: unknown option '%s'", argv[i]);
		}
	}
	if (i == argc)
		return lf_cli_error("run needs a program: loopfast run [--] PROG [ARGS...]");
	if (!(lib = find_preload()))
		return lf_cli_error("cannot find libloopfast-preload.so next to %s (set LOOPFAST_PRELOAD)", lf_cli_selfdir());
	if (!find_in_path(argv[i], path, sizeof(path)))
		return lf_cli_error("cannot run '%s': not found or not executable", argv[i]);
	const char *why = force ? (!strcmp(force, "seccomp") ? "named with --mode seccomp" : NULL) : lf_cli_supervise_why(path);
	if (why) {
		/* The supervisor's own libloopfast reads LOOPFAST_EXCLUDE. */
		if (exclude && add_exclude(exclude))
			return lf_cli_error("out of memory");
		if (spin)
			fprintf(stderr, "loopfast: --spin-us: a supervised program's data calls are not seen: no spinning\n");
		return lf_cli_supervise(path, argv + i, why, strcmp(mode, "1") != 0, mainpid);
	}
	if (is_static_elf(path))
		fprintf(stderr, "loopfast: %s is statically linked: the fast path cannot apply to it; running it on plain TCP\n", path);

	const char *old = getenv("LD_PRELOAD");
	char *preload;
	if (asprintf(&preload, "%s%s%s", lib, old && *old ? " " : "", old && *old ? old : "") < 0)
		return lf_cli_error("out of memory");
	setenv("LD_PRELOAD", preload, 1);
	setenv("LOOPFAST_ENABLE", mode, 1);
	if (spin)
		setenv("LOOPFAST_SPIN_US", spin, 1);
	if (tier)
		setenv("LOOPFAST_TIER", tier, 1);
	if (exclude && add_exclude(exclude))
		return lf_cli_error("out of memory");
	execv(path, argv + i);
	int e = errno;
	lf_cli_error("cannot run '%s': %s", path, strerror(e));
	return e == ENOENT ? 127 : 126;
}
