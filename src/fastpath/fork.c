/* fork: every handler of the fast path, registered in one place and run in
 * one fixed order, so that the order does not depend on which subsystem a
 * process happened to use first. Registered once, by the first subsystem
 * that holds something a fork must handle (lf__fork_init); each handler
 * does nothing for a subsystem the process never used.
 *
 * The three locks (sockopt.c's reference connections, diag.c's netlink
 * socket, shm_mem.c's due give-backs) are never held together, so the order between them is free; the
 * parent releases them in the reverse of the prepare's order. */
#include "process.h"
#include "sys.h"

#include <pthread.h>

static void prepare(void)
{
	lf__bell_fork_prepare(); /* notes whether bells are kept across the fork (takes no lock) */
	lf__shm_fork_prepare();  /* counts each tier end's holders (takes no lock) */
	lf__sopt_fork_prepare(); /* takes the reference connections' lock */
	lf__diag_fork_prepare(); /* takes the netlink socket's lock */
	lf__shm_mem_fork_prepare(); /* takes the due give-backs' lock */
}

static void parent(void)
{
	lf__shm_fork_after(); /* the fork's number, even again */
	lf__shm_mem_fork_after();
	lf__diag_fork_parent();
	lf__sopt_fork_parent();
}

static void child(void)
{
	/* First: the child's own netlink socket is made while its
	 * descriptors are still the parent's (diag.c). */
	lf__diag_fork_child();
	lf__sopt_fork_child();    /* the parent's reference connections closed */
	lf__stats_fork_child();   /* the parent's counts page dropped */
	lf__connect_fork_child(); /* the client names' nonce takes the child's pid */
	lf__shm_fork_after(); /* the fork's number, even again */
	lf__sys_forked();         /* not a vfork child: its tables are its own */
	lf__shm_spin_fork_child(); /* the child registers for membarrier itself */
	/* Before the next: the due give-backs' lock (the list is the child's
	 * too), which a connection's last put takes (lf__shm_mem_forget). */
	lf__shm_mem_fork_after();
	lf__shm_epoll_fork_child(); /* no epoll_ctl nor call of the parent's other threads runs here: puts what they held */
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void register_handlers(void) { pthread_atfork(prepare, parent, child); }

void lf__fork_init(void)
{
	pthread_once(&once, register_handlers);
}

/* At load: every fork's child then says its own pid (lf__sys_forked), so
 * that a child forked before the process used a socket is never taken
 * for a vfork child (lf__sys_vfork_child), whatever kcmp can say there. */
__attribute__((constructor)) static void fork_load(void)
{
	lf__fork_init();
}
