/* Internal interfaces of libloopfast: one header per layer, bottom up,
 * each including only the layers below it:
 *
 *   sys.h        raw system calls, past any interposer (sys.c)
 *   fdtab.h      the per-fd table (fdtab.c)
 *   process.h    sock_diag, counts, LOOPFAST_EXCLUDE, signal counters,
 *                fork handlers (diag.c, stats.c, exclude.c, signals.c, fork.c)
 *   spin.h       the spin tier (spin.c)
 *   negotiate.h  listener, stash, claim, connect, bell
 *   sockopt.h    socket options' answers, SOL_LOOPFAST (sockopt.c, api.c)
 *
 * and the export macros of the interposed calls. A file of a low layer
 * includes its own layer's header; the interposed calls include this one.
 * Non-static internal symbols carry the lf__ prefix; nothing here is
 * exported (see loopfast.map). */
#ifndef LF_INTERNAL_H
#define LF_INTERNAL_H

#include "sys.h"
#include "fdtab.h"
#include "process.h"
#include "spin.h"
#include "negotiate.h"
#include "sockopt.h"
#include "shm.h" /* the shared-memory tier (shm.c) */

#define LF_EXPORT __attribute__((visibility("default")))
/* A file's own calls to a function it exports go through a second, static
 * name for it: LF_LOCAL(recvmsg) declares local_recvmsg, bound at link
 * time. Through the exported name a call takes the PLT and reaches
 * whichever definition the dynamic linker picks (another preloaded
 * library's, or libc's), not necessarily this one. src/fastpath/README.md
 * has the check that no such call is left. */
#if __has_attribute(copy) /* gcc: the alias keeps the target's attributes (nothrow) */
#define LF_LOCAL(fn) static __typeof(fn) local_##fn __attribute__((alias(#fn), copy(fn)))
#else
#define LF_LOCAL(fn) static __typeof(fn) local_##fn __attribute__((alias(#fn)))
#endif

#endif
