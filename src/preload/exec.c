/* exec under `loopfast run`: a program exec'd with an opted-in listener
 * open inherits its rendezvous, so fast-path clients keep queueing hellos
 * for it; it must be under loopfast too, or it accepts their doorbells as
 * plain TCP and every such client waits on a hello nobody claims. Programs
 * that pass a listener on across exec often pass a cleaned environment
 * (systemd-socket-activate passes LISTEN_FDS and little else; nginx's
 * binary upgrade passes TZ, its `env` directives and NGINX), which drops
 * LD_PRELOAD. So, once a rendezvous of this process has been left open
 * across exec (lf__rendezvous_inheritable counts those still open), every
 * exec gets this library
 * back in LD_PRELOAD and loopfast's variables back, when its environment
 * dropped them. Nothing is allocated (vfork children exec too): the new
 * environment is built on the stack.
 *
 * What this cannot cover: a static program (LD_PRELOAD does nothing; the
 * seccomp supervisor will), and a set-user-ID one (the loader ignores
 * LD_PRELOAD for it).
 *
 * The shared-memory tier's sockets that stay open across an exec take
 * their rings along the same way (src/fastpath/shm_exec.c): the library
 * back in LD_PRELOAD, and their record in LOOPFAST_SHM_EXEC; for a program
 * that cannot load the library (static, set-id, another ELF class: read
 * from the file itself) they are shut down instead (docs/shm.md, "exec"). */
#include "internal.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static char self[PATH_MAX]; /* this library's path, for LD_PRELOAD */
static const char *const carried[] = { "LOOPFAST_ENABLE", "LOOPFAST_SPIN_US", "LOOPFAST_TIER", "LOOPFAST_EXCLUDE", "LOOPFAST_DEBUG" };
#define NCARRIED (sizeof(carried) / sizeof(carried[0]))

typedef int spawn_fn(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
		     char *const[], char *const[]);
static int (*real_execve)(const char *, char *const[], char *const[]);
static int (*real_execvpe)(const char *, char *const[], char *const[]);
static int (*real_fexecve)(int, char *const[], char *const[]);
static spawn_fn *real_posix_spawn, *real_posix_spawnp;

/* Everything is looked up here, once, at start-up (preload.c): a vfork
 * child must not call dlsym. */
void lf__exec_init(void)
{
	Dl_info di;

	if (dladdr((void *)lf__exec_init, &di) && di.dli_fname && di.dli_fname[0] == '/' &&
	    strlen(di.dli_fname) < sizeof(self))
		strcpy(self, di.dli_fname);
	real_execve = (int (*)(const char *, char *const[], char *const[]))dlsym(RTLD_NEXT, "execve");
	real_execvpe = (int (*)(const char *, char *const[], char *const[]))dlsym(RTLD_NEXT, "execvpe");
	real_fexecve = (int (*)(int, char *const[], char *const[]))dlsym(RTLD_NEXT, "fexecve");
	real_posix_spawn = (spawn_fn *)dlsym(RTLD_NEXT, "posix_spawn");
	real_posix_spawnp = (spawn_fn *)dlsym(RTLD_NEXT, "posix_spawnp");
}

static size_t env_count(char *const envp[])
{
	size_t n = 0;

	while (envp && envp[n])
		n++;
	return n;
}

/* The value of NAME in envp, or NULL. */
static const char *env_get(char *const envp[], const char *name)
{
	size_t l = strlen(name);

	for (size_t i = 0; envp && envp[i]; i++)
		if (!strncmp(envp[i], name, l) && envp[i][l] == '=')
			return envp[i] + l + 1;
	return NULL;
}

static bool needed(char *const envp[], const char *shm)
{
	const char *pre;

	if (shm[0]) /* tier sockets stay open: their rings go with them (shm_exec.c) */
		return true;
	if (!atomic_load(&lf__rendezvous_inheritable) || !self[0])
		return false;
	if (!(pre = env_get(envp, "LD_PRELOAD")) || !strstr(pre, self))
		return true;
	for (size_t i = 0; i < NCARRIED; i++)
		if (getenv(carried[i]) && !env_get(envp, carried[i]))
			return true;
	return false;
}

/* Fills env (room: env_count(envp) + NCARRIED + 3) with envp, its
 * LD_PRELOAD led by this library (written into pre), loopfast's
 * variables from this process's environment where envp lacks them, and
 * shm (the tier's record, shm_exec.c) when not empty, in place of any
 * record envp holds. */
static char *const *fixed(char *const envp[], char **env, char *pre, size_t pre_room, char *shm)
{
	const char *old = env_get(envp, "LD_PRELOAD");
	size_t k = 0;

	for (size_t i = 0; envp && envp[i]; i++)
		if (strncmp(envp[i], "LD_PRELOAD=", 11) && (!shm[0] || strncmp(envp[i], "LOOPFAST_SHM_EXEC=", 18)))
			env[k++] = envp[i];
	if (!self[0])
		snprintf(pre, pre_room, "LD_PRELOAD=%s", old ? old : "");
	else if (old && strstr(old, self))
		snprintf(pre, pre_room, "LD_PRELOAD=%s", old);
	else
		snprintf(pre, pre_room, "LD_PRELOAD=%s%s%s", self, old && *old ? " " : "", old ? old : "");
	env[k++] = pre;
	for (size_t i = 0; i < NCARRIED; i++) {
		const char *v = getenv(carried[i]);
		if (v && !env_get(envp, carried[i]))
			env[k++] = (char *)v - strlen(carried[i]) - 1; /* "NAME=value" in environ */
	}
	if (shm[0])
		env[k++] = shm;
	env[k] = NULL;
	return env;
}

/* Whether the program that fd holds will run with this library: not when
 * it is set-id for another user or group (the loader then ignores
 * LD_PRELOAD), nor an ELF that is static (no PT_INTERP) or not of this
 * library's class. Anything else (a script, what cannot be read) counts
 * as yes. Closes fd when `own`. */
static bool fd_takes_preload(int fd, bool own)
{
	ElfW(Ehdr) eh;
	ElfW(Phdr) ph[64];
	struct stat st;
	bool yes = true;

	if (fd < 0)
		return true;
	if (!fstat(fd, &st) && (((st.st_mode & S_ISUID) && st.st_uid != geteuid()) ||
				((st.st_mode & S_ISGID) && st.st_gid != getegid()))) {
		yes = false;
	} else if (pread(fd, &eh, sizeof(eh), 0) == (ssize_t)sizeof(eh) && !memcmp(eh.e_ident, ELFMAG, SELFMAG)) {
		size_t n = eh.e_phnum < 64 ? eh.e_phnum : 64;
		yes = false;
		if (eh.e_ident[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) &&
		    eh.e_phentsize == sizeof(ph[0]) &&
		    pread(fd, ph, n * sizeof(ph[0]), (off_t)eh.e_phoff) == (ssize_t)(n * sizeof(ph[0])))
			for (size_t i = 0; i < n && !yes; i++)
				yes = ph[i].p_type == PT_INTERP;
	}
	if (own)
		lf__sys_close(fd);
	return yes;
}

static bool takes_preload(int dirfd, const char *path, int flags)
{
	if ((flags & AT_EMPTY_PATH) && !*path)
		return fd_takes_preload(dirfd, false);
	return fd_takes_preload(openat(dirfd, path, O_RDONLY | O_CLOEXEC), true);
}

/* execvp's file: found on PATH as execvp will (the first executable). */
static bool file_takes_preload(const char *file)
{
	const char *path = getenv("PATH");

	if (strchr(file, '/') || !*file)
		return takes_preload(AT_FDCWD, file, 0);
	for (const char *p = path ? path : "/bin:/usr/bin"; p;) {
		const char *end = strchr(p, ':');
		size_t l = end ? (size_t)(end - p) : strlen(p);
		char full[PATH_MAX];
		if (l + strlen(file) + 2 <= sizeof(full)) {
			snprintf(full, sizeof(full), "%.*s/%s", (int)l, l ? p : ".", file);
			if (!access(full, X_OK))
				return takes_preload(AT_FDCWD, full, 0);
		}
		p = end ? end + 1 : NULL;
	}
	return true;
}

/* Declares the stack room for envp's fixed copy and sets `out` to it (or
 * to envp when nothing needs carrying). exec: the tier sockets that stay
 * open take their rings along (posix_spawn's child is another process:
 * its record would not check out, so nothing is carried there); after an
 * exec that failed, SHM_UNDO gives their memfds close-on-exec back. */
#define FIX_ENV_(envp, out, exec, takes)                                                               \
	size_t shmroom_ = (exec) ? lf__shm_exec_room() : 0, nundo_ = 0;                                \
	char shm_[shmroom_ ? shmroom_ : 1];                                                            \
	int undo_[shmroom_ ? LF_SHM_EXEC_FDS : 1];                                                     \
	shm_[0] = 0;                                                                                   \
	if (shmroom_)                                                                                  \
		lf__shm_exec_prepare(shm_, shmroom_, undo_, &nundo_);                                  \
	if (shm_[0] && !(takes)) { /* a program without this library: the end, not tokens */          \
		lf__shm_exec_undo(undo_, nundo_, NULL);                                                \
		lf__shm_exec_shut(shm_);                                                               \
		nundo_ = 0;                                                                            \
		shm_[0] = 0;                                                                           \
	}                                                                                              \
	if (shm_[0])                                                                                   \
		lf__shm_exec_counted(shm_, true);                                                      \
	bool fix_ = needed(envp, shm_);                                                                \
	const char *old_ = fix_ ? env_get(envp, "LD_PRELOAD") : NULL;                                  \
	char *env_[fix_ ? env_count(envp) + NCARRIED + 3 : 1];                                          \
	char pre_[fix_ ? sizeof("LD_PRELOAD= ") + strlen(self) + (old_ ? strlen(old_) : 0) : 1];       \
	char *const *out = fix_ ? fixed(envp, env_, pre_, sizeof(pre_), shm_) : (envp)
#define SHM_UNDO(call) ({ int r_ = (call); lf__shm_exec_undo(undo_, nundo_, shm_[0] ? shm_ : NULL); r_; })

/* Resolved by the constructor; a constructor of another library that
 * runs before it finds them still unresolved, and resolves them here (a
 * vfork child never does: the parent ran the constructors). */
#define RESOLVE(fn, name) ((fn) ? (fn) : ((fn) = (__typeof__(fn))dlsym(RTLD_NEXT, name)))
#define CALL(fn, name, ...) (RESOLVE(fn, name) ? (fn)(__VA_ARGS__) : (errno = ENOSYS, -1))

LF_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	FIX_ENV_(envp, env, true, takes_preload(AT_FDCWD, path, 0));

	if (!RESOLVE(real_execve, "execve"))
		return SHM_UNDO(lf__sys_execve(path, argv, env));
	return SHM_UNDO(real_execve(path, argv, env));
}
LF_LOCAL(execve);

LF_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	FIX_ENV_(envp, env, true, file_takes_preload(file));

	return SHM_UNDO(CALL(real_execvpe, "execvpe", file, argv, env));
}
LF_LOCAL(execvpe);

LF_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	FIX_ENV_(envp, env, true, fd_takes_preload(fd, false));

	return SHM_UNDO(CALL(real_fexecve, "fexecve", fd, argv, env));
}

LF_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	FIX_ENV_(envp, env, true, takes_preload(dirfd, path, flags));

	return SHM_UNDO(lf__sys_execveat(dirfd, path, argv, env, flags));
}

LF_EXPORT int execv(const char *path, char *const argv[])
{
	return local_execve(path, argv, environ);
}

LF_EXPORT int execvp(const char *file, char *const argv[])
{
	return local_execvpe(file, argv, environ);
}

/* execl, execle, execlp: their arguments, up to the NULL, as an array on
 * the stack; execle's envp follows the NULL. */
static size_t nargs(va_list ap)
{
	size_t n = 1;

	while (va_arg(ap, char *))
		n++;
	return n;
}

#define ARGV_OF(arg0, last, argv)                                                                      	va_list ap;                                                                                    	va_start(ap, last);                                                                            	size_t n_ = nargs(ap);                                                                         	va_end(ap);                                                                                    	char *argv[n_ + 1];                                                                            	argv[0] = (char *)(arg0);                                                                      	va_start(ap, last);                                                                            	for (size_t i_ = 1; i_ <= n_; i_++)                                                            		argv[i_] = va_arg(ap, char *)

LF_EXPORT int execl(const char *path, const char *arg0, ...)
{
	ARGV_OF(arg0, arg0, argv);
	va_end(ap);
	return local_execve(path, argv, environ);
}

LF_EXPORT int execlp(const char *file, const char *arg0, ...)
{
	ARGV_OF(arg0, arg0, argv);
	va_end(ap);
	return local_execvpe(file, argv, environ);
}

LF_EXPORT int execle(const char *path, const char *arg0, ...)
{
	ARGV_OF(arg0, arg0, argv);
	char *const *envp = va_arg(ap, char *const *);
	va_end(ap);
	return local_execve(path, argv, envp);
}

LF_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			  const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	FIX_ENV_(envp, env, false, true);

	return RESOLVE(real_posix_spawn, "posix_spawn") ? real_posix_spawn(pid, path, fa, attr, argv, env) : ENOSYS;
}

LF_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	FIX_ENV_(envp, env, false, true);

	return RESOLVE(real_posix_spawnp, "posix_spawnp") ? real_posix_spawnp(pid, file, fa, attr, argv, env) : ENOSYS;
}
