/* The LD_PRELOAD flavour of the library: reads the environment that
 * `loopfast run` sets and opts in every TCP socket of the process.
 *
 *   LOOPFAST_ENABLE=1     opt in every TCP socket (clients and listeners)
 *   LOOPFAST_ENABLE=per-socket (or unset)  opt in none: only the sockets
 *                         the program opts in (SOL_LOOPFAST option, C API)
 *   LOOPFAST_SPIN_US=N    busy-poll budget for fast-path sockets
 *   LOOPFAST_TIER=shm     every socket asks for the shared-memory tier (shm.c)
 *   LOOPFAST_DEBUG=1      say on stderr why a connection took plain TCP
 *   LOOPFAST_EXCLUDE=...  listeners and destinations kept on plain TCP
 *                         (exclude.c; parsed here, before any rendezvous)
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Start-up, stage 2 of 2 (stage 1: fdtab.c's, LOOPFAST_DEBUG): exec's
 * wrappers, then the environment. The only other constructor of the
 * preload. */
__attribute__((constructor(102))) static void preload_init(void)
{
	lf__exec_init();
	const char *e = getenv("LOOPFAST_ENABLE"), *s = getenv("LOOPFAST_SPIN_US");

	lf__global_optin = e && e[0] == '1';
	if (s)
		lf__global_spin_us = (unsigned)strtoul(s, NULL, 10);
	const char *t = getenv("LOOPFAST_TIER");
	lf__shm_global = t && !strcmp(t, "shm");
	/* Signal handlers are wrapped whenever a fast-path connection may
	 * exist: a wait of loopfast's own (a spin, a bell) must end as the
	 * application's blocking call would. */
	lf__spin_used = lf__global_spin_us > 0 || lf__global_optin;
	lf__exclude_init();
	if (lf__global_optin)
		lf__adopt_inherited();
	lf__shm_exec_adopt(); /* tier sockets kept across the exec that started this program */
}
