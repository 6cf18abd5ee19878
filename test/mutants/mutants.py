"""The mutants `make test-mutants` builds, one at a time (test/mutants/run.py).

Each is a deliberate fault: the edits that make it (file, an exact snippet
of today's source, its replacement), and the subset of the suite that must
catch it (scripts/test.sh --only specs, see test/README.md). A snippet must
occur exactly once in its file, or the run fails before building anything:
the code moves on, and a mutant that silently stopped applying would be a
test that cannot fail. When one fails that way, rewrite its snippet against
the code as it is now, keeping the fault it stands for.

`until`: the branch whose tests will catch it, for a mutant no test on main
can catch yet. The run lists it as an expected survivor (a strict expected
failure: it fails the day the mutant is killed, so that the mark comes off
when that branch lands). Every other survivor fails the run.

`env`: extra environment for the subset; `limit_s`: how long the subset
may take before it counts as hung (a hang is a failure, so: killed).
"""


class Mutant:
    def __init__(self, name, what, edits, only, until=None, why=None, env=None, limit_s=300):
        self.name, self.what, self.edits, self.only = name, what, edits, only
        self.until, self.why, self.env, self.limit_s = until, why, env or {}, limit_s


MUTANTS = [
    # ---- the negotiation (connect.c, claim.c, listener.c)
    Mutant(
        "negotiation-always-tcp",
        "every connect finds no listener and falls back to plain TCP",
        [("src/fastpath/connect.c",
          "\tif (lf__diag_listener(&dst, &src, &lst) < 0)\n",
          "\tif (lf__diag_listener(&dst, &src, &lst) < 0 || 1)\n")],
        ["e2e:test_compare.py -k 'names-v4 or test_both_ends_in_different_processes' -m 'not extra'"]),
    Mutant(
        "client-stays-on-tcp",
        "the server claims the hello, the client keeps its TCP socket",
        [("src/fastpath/connect.c",
          "\tlf__count(LF_EV_FAST_CLIENT);\n\tif (lf__switch_fd(unx, fd, family, f, nonblock, cloexec, LF_SW_CLIENT) < 0) {\n",
          "\tlf__count(LF_EV_FAST_CLIENT);\n\tlf__sys_close(unx);\n\tif (0) {\n")],
        ["e2e:test_compare.py -k 'names-v4 or test_both_ends_in_different_processes' -m 'not extra'"]),
    Mutant(
        "hello-unverified",
        "a hello is accepted without verification (vouched() always true)",
        [("src/fastpath/claim.c",
          "\treturn lf__diag_socket(peer, local, &d) == 0 && d.uid == uid",
          "\treturn 1 || lf__diag_socket(peer, local, &d) == 0 && d.uid == uid")],
        ["e2e:test_security.py -k 'watcher_race or junk_hellos_naming'"],),
    Mutant(
        "hello-from-another-uid",
        "a hello is accepted from another uid (sock_diag's owner not compared with the sender's uid)",
        [("src/fastpath/claim.c",
          "d.uid == uid && d.state != TCP_TIME_WAIT",
          "d.state != TCP_TIME_WAIT")],
        ["e2e:test_security.py -k 'watcher_race or junk_hellos_naming'"],),
    Mutant(
        "client-joins-squatter",
        "the client joins a rendezvous created by another uid than the listener's owner",
        [("src/fastpath/connect.c",
          " || cr.uid != lst.uid)\n",
          ")\n")],
        ["e2e:test_security.py -k squatted"]),
    Mutant(
        "hello-carries-tcp-socket",
        "the client sends its TCP socket in the hello (protocol 1's capability leak)",
        [("src/fastpath/connect.c",
          "static int queue_hello(int fd, int family, struct lf_ep src, struct lf_ep dst, struct lf_diag_sock lst)\n{\n",
          "static void leak_fd(int unx, int fd)\n"
          "{\n"
          "\tchar c[CMSG_SPACE(sizeof(int))] = { 0 };\n"
          "\tstruct iovec iov = { (void *)\"h\", 1 };\n"
          "\tstruct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c, .msg_controllen = sizeof(c) };\n"
          "\tstruct cmsghdr *cm = CMSG_FIRSTHDR(&m);\n"
          "\tcm->cmsg_level = SOL_SOCKET;\n"
          "\tcm->cmsg_type = SCM_RIGHTS;\n"
          "\tcm->cmsg_len = CMSG_LEN(sizeof(int));\n"
          "\tmemcpy(CMSG_DATA(cm), &fd, sizeof(int));\n"
          "\tlf__sys_sendmsg(unx, &m, MSG_NOSIGNAL | MSG_DONTWAIT);\n"
          "}\n\n"
          "static int queue_hello(int fd, int family, struct lf_ep src, struct lf_ep dst, struct lf_diag_sock lst)\n{\n"),
         ("src/fastpath/connect.c",
          "\telse if (lf__sys_getsockopt(unx, SOL_SOCKET, SO_PEERCRED, &cr, &crl)",
          "\telse if ((leak_fd(unx, fd), 0) || lf__sys_getsockopt(unx, SOL_SOCKET, SO_PEERCRED, &cr, &crl)")],
        ["e2e:test_security.py -k squatted"]),
    Mutant(
        "stash-unbounded",
        "the stash never refuses a hello (no per-uid share, no total)",
        [("src/fastpath/stash.c",
          "\tif ((!vouched && (!c || *c >= share(m))) || m->total >= m->cap)\n",
          "\tif (0 && ((!vouched && (!c || *c >= share(m))) ||"
          " m->total >= m->cap))\n")],
        ["e2e:test_security.py -k no_more_than_its_share"],),
    Mutant(
        "stash-keeps-dead",
        "a hello whose client has gone is never dropped (lf__stash_hello_dead() never true)",
        [("src/fastpath/stash.c",
          "\treturn ev > 0 && (ev & (POLLHUP | POLLERR)) && lf__sys_ioctl(fd, FIONREAD, &inq) == 0 && inq == 0;\n",
          "\treturn 0 && ev > 0 && (ev & (POLLHUP | POLLERR)) && lf__sys_ioctl(fd, FIONREAD, &inq) == 0 && inq == 0;\n")],
        ["e2e:test_security.py -k test_killed_client_then_its_port_reused"],),
    Mutant(
        "internal-fd-closable",
        "close() of one of loopfast's own descriptors really closes it",
        [("src/fastpath/interpose.c",
          "\tif (f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_HIDDEN))\n\t\treturn 0;\n",
          "\tif (0 && f && (atomic_load_explicit(&f->flags, memory_order_relaxed) & LF_F_HIDDEN))\n\t\treturn 0;\n")],
        ["e2e:test_robust.py -k test_server_that_closes_every_other_descriptor_after_listen"],),
    Mutant(
        "connect-nonblock-blocks",
        "a non-blocking connect waits for the doorbell's handshake instead of returning EINPROGRESS",
        [("src/fastpath/connect.c",
          "\t\tint err, h = handshake(fd, 0, &err);\n",
          "\t\tint err, h = handshake(fd, -1, &err);\n")],
        ["e2e:test_compare.py -k 'connect-again-v4 or connect-full-poll-v4' -m 'not extra'"], limit_s=60),
    Mutant(
        "connect-uninterruptible",
        "a signal cannot interrupt a blocking connect (signals blocked around the doorbell)",
        [("src/fastpath/connect.c",
          "\tint r = lf__sys_connect(fd, sa, len);\n\te = r ? errno : 0;\n",
          "\tsigset_t all_, old_;\n\tsigfillset(&all_);\n\tpthread_sigmask(SIG_BLOCK, &all_, &old_);\n"
          "\tint r = lf__sys_connect(fd, sa, len);\n\te = r ? errno : 0;\n"
          "\tpthread_sigmask(SIG_SETMASK, &old_, NULL);\n"),
         ("src/fastpath/connect.c", "#include <pthread.h>\n", "#include <pthread.h>\n#include <signal.h>\n")],
        ["e2e:test_compare.py -k 'connect-eintr-v4 or connect-eintr-reconnect-v4' -m 'not extra'"], limit_s=60),

    # ---- what the attacks found (bell.c, io.c)
    Mutant(
        "bell-deaf",
        "the client takes any end of its TCP connection for the claim (an unclaimed hello is waited on forever)",
        [("src/fastpath/bell.c",
          "\tif (!(ev & POLLNVAL) && !claim_seen(f->bell, &reset)) {\n",
          "\tif (0) {\n")],
        ["e2e:test_security.py -k worker_killed_between"]),
    Mutant(
        "reset-taken-for-claim",
        "the client's bell takes any reset for the claim, mark or none (a connection reset before its accept "
        "leaves its client waiting on a hello nobody holds)",
        [("src/fastpath/bell.c",
          "\tif (!(ev & POLLNVAL) && !claim_seen(f->bell, &reset)) {\n",
          "\tif (!(ev & (POLLNVAL | POLLERR | POLLHUP)) && !claim_seen(f->bell, &reset)) {\n")],
        ["e2e:test_robust.py -k 'reset_before and select'"], limit_s=120),
    Mutant(
        "mark-consumed",
        "the bell reads the claim's mark instead of peeking at it (after a fork, the second process to look "
        "takes its good connection for a failed one)",
        [("src/fastpath/bell.c",
          "MSG_DONTWAIT | MSG_PEEK, NULL, NULL);\n",
          "MSG_DONTWAIT, NULL, NULL);\n")],
        ["e2e:test_robust.py -k forked_client"]),
    Mutant(
        "bell-wait-eintr-on-any-signal",
        "a blocking read waiting on the bell returns EINTR after any signal, SA_RESTART ones and glibc's set*id "
        "broadcast included",
        [("src/fastpath/bell.c",
          "\t\t\tif (atomic_load(&lf__sig_interrupt) != i0)\n\t\t\t\treturn -1;\n",
          "\t\t\t(void)i0;\n\t\t\treturn -1;\n")],
        ["e2e:test_robust.py -k set_id_broadcast"]),
    Mutant(
        "rights-cross",
        "descriptors cross the fast path (SO_PASSRIGHTS left on, recvmsg keeps what arrives)",
        [("src/fastpath/sys.c",
          "\treturn lf__sys_setsockopt(unx, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off));\n",
          "\t(void)unx;\n\t(void)off;\n\treturn 0;\n"),
         ("src/fastpath/io.c",
          "\tcopy.msg_control = NULL;\n\tcopy.msg_controllen = 0;\n\tssize_t r;\n",
          "\tssize_t r;\n"),
         ("src/fastpath/io.c",
          "\t\tm->msg_controllen = 0;\n\t\tm->msg_flags = copy.msg_flags & ~MSG_CTRUNC;\n",
          "\t\tm->msg_controllen = copy.msg_controllen;\n\t\tm->msg_flags = copy.msg_flags;\n")],
        ["e2e:test_security.py -k passes_no_descriptor"]),

    # ---- what the interposer answers (interpose.c)
    Mutant(
        "getpeername-wrong-port",
        "getpeername on a fast-path socket answers the peer's port + 1",
        [("src/fastpath/interpose.c",
          "\t\tput_addr(peer ? &remote : &local, family, sa, room, len);\n",
          "\t{\n\t\tstruct lf_ep x_ = peer ? remote : local;\n\t\tx_.port += peer;\n"
          "\t\tput_addr(&x_, family, sa, room, len);\n\t}\n")],
        ["e2e:test_compare.py -k 'names-v4' -m 'not extra'"]),
    Mutant(
        "halfclose-swallowed",
        "shutdown(SHUT_WR) on a fast-path socket succeeds but is not passed on",
        [("src/fastpath/interpose.c",
          "\tr = how == SHUT_RD ? 0 : REAL(shutdown)(fd, SHUT_WR);\n",
          "\tr = how == SHUT_RD || how == SHUT_WR ? 0 : REAL(shutdown)(fd, SHUT_WR);\n")],
        ["e2e:test_compare.py -k 'halfclose-v4' -m 'not extra'"], limit_s=30),

    # ---- the spin tier (spin.c), run with spinning on
    Mutant(
        "spin-drops-a-byte",
        "the spin tier's receive drops one byte in every 64 KiB",
        [("src/fastpath/spin.c",
          "\t\tssize_t n = REAL(recvmsg)(fd, m, flags | MSG_DONTWAIT);\n",
          "\t\tssize_t n = REAL(recvmsg)(fd, m, flags | MSG_DONTWAIT);\n"
          "\t\tstatic size_t seen_;\n"
          "\t\tif (n > 1 && m->msg_iovlen >= 1 && m->msg_iov[0].iov_len >= (size_t)n &&\n"
          "\t\t    (seen_ + (size_t)n) / 65536 != seen_ / 65536) {\n"
          "\t\t\tmemmove(m->msg_iov[0].iov_base, (char *)m->msg_iov[0].iov_base + 1, (size_t)n - 1);\n"
          "\t\t\tn--;\n"
          "\t\t}\n"
          "\t\tif (n > 0)\n\t\t\tseen_ += (size_t)n;\n")],
        ["e2e-spin:test_compare.py -k 'bulk' -m 'not extra'"],
        env={"LFPROBE_BULK_MB": "16"}),
    Mutant(
        "spin-read-ignores-signal",
        "a spinning read carries on through a signal (no EINTR)",
        [("src/fastpath/spin.c",
          "\t\tif (atomic_load(&lf__sig_seen) != s0) {\n\t\t\tif (atomic_load(&lf__sig_interrupt) == i0)\n",
          "\t\tif (0 && atomic_load(&lf__sig_seen) != s0) {\n\t\t\tif (atomic_load(&lf__sig_interrupt) == i0)\n")],
        ["c:test-spin:signal_interrupts_spinning_read"], limit_s=60),
    # A signal reaches a spinning wait two ways: it interrupts the
    # zero-timeout ppoll/pselect/epoll_pwait of a try (nearly always: the
    # loop is mostly in the kernel), or its handler runs in user space
    # between two tries (sig_seen). Ignoring only the second is a fault no
    # test can show reliably (a window of a few hundred nanoseconds per
    # try); this mutant ignores both.
    Mutant(
        "spin-wait-ignores-signal",
        "a spinning poll/select/epoll_wait carries on through a signal (EINTR of a try retried, sig_seen ignored)",
        [("src/fastpath/spin.c",
          "\t\tint r = w->try(w->arg);\n\t\tif (r != 0) {\n",
          "\t\tint r = w->try(w->arg);\n\t\tif (r < 0 && errno == EINTR)\n\t\t\tr = 0;\n\t\tif (r != 0) {\n"),
         ("src/fastpath/spin.c",
          "\t\tif (atomic_load(&lf__sig_seen) != s0) { /* waits are never restarted */\n",
          "\t\tif (0 && atomic_load(&lf__sig_seen) != s0) { /* waits are never restarted */\n")],
        ["c:test-spin:signal_interrupts_spinning_poll_even_with_restart"], limit_s=60),

    # ---- Registered I/O (src/rio)
    Mutant(
        "rio-bytes-off-by-one",
        "a send or receive completion reports one byte less than the kernel did",
        [("src/rio/rio_complete.c",
          "\tres->bytes = cqe->res > 0 ? (uint32_t)cqe->res : 0;\n",
          "\tres->bytes = cqe->res > 0 ? (uint32_t)cqe->res - 1 : 0;\n")],
        ["c:test-rio-rq", "c:test-rio"]),
    Mutant(
        "rio-multishot-bytes",
        "a multishot receive's completion reports one byte more than it received",
        [("src/rio/rio_complete.c",
          "\t\tres->bytes = (uint32_t)cqe->res;\n",
          "\t\tres->bytes = (uint32_t)cqe->res + 1;\n")],
        ["c:test-rio-rq:multishot"]),

    # ---- issue 17: RIO accounting, spin, api (rio)
    Mutant(
        "rio-cq-reservations-not-summed",
        "a completion queue checks each request queue against its size alone, not what the others reserved",
        [("src/rio/rio_rq.c",
          "\trcq->reserved += max_recv;\n\tscq->reserved += max_send;\n",
          "")],
        ["c:test-rio:cq_reservations", "c:test-rio:cq_reservations_split"]),
    Mutant(
        "rio-multishot-slices-not-counted",
        "a request queue with an active multishot receive still posts max_recv receives (past its reservation)",
        [("src/rio/rio_rq.c",
          "\tif (kind != RIO_SEND && rq->nrecv >= rq->max_recv)\n",
          "\tif (0 && kind != RIO_SEND && rq->nrecv >= rq->max_recv)\n")],
        ["c:test-rio:cq_reservations"]),
    Mutant(
        "rio-multishot-ended-by-full-ring",
        "a multishot receive that the kernel ended because the completion ring was full is not re-armed",
        [("src/rio/rio_complete.c",
          "\t\tif (!rq->closing && !ms->stopped && (cqe->res == -ENOBUFS || cqe->res >= 0)) {\n",
          "\t\tif (!rq->closing && !ms->stopped && cqe->res == -ENOBUFS) {\n")],
        ["c:test-rio-rq:multishot_overflows_cq"]),
    Mutant(
        "spin-read-never-spins",
        "a blocking read on a spinning fast-path socket blocks at once (the spin returns to blocking)",
        [("src/fastpath/spin.c",
          "\tif (!us)\n\t\treturn LF_SPIN_BLOCK;\n\tuint64_t end = lf__sys_now_ns() + us * 1000ull;\n",
          "\tif (!us || 1)\n\t\treturn LF_SPIN_BLOCK;\n\tuint64_t end = lf__sys_now_ns() + us * 1000ull;\n")],
        ["c:test-spin:spin_outlasts_a_write_at_half_its_budget"]),
    Mutant(
        "spin-read-budget-in-ns",
        "a spinning read's budget is taken in nanoseconds (a 200 ms spin ends after 200 us)",
        [("src/fastpath/spin.c",
          "\tuint64_t end = lf__sys_now_ns() + us * 1000ull;\n",
          "\tuint64_t end = lf__sys_now_ns() + us;\n")],
        ["c:test-spin:spin_outlasts_a_write_at_half_its_budget"]),
    Mutant(
        "spin-wait-time-left-in-us",
        "a poll/select/epoll wait longer than the spin gets the time left in microseconds, not nanoseconds "
        "(it returns 0 long before its timeout)",
        [("src/fastpath/spin.c",
          "\t\t*left_ns = timeout_ns - (int64_t)(now - start);\n",
          "\t\t*left_ns = (timeout_ns - (int64_t)(now - start)) / 1000;\n")],
        ["c:test-spin:timeouts_longer_than_spin"]),
    Mutant(
        "api-active-on-plain-tcp",
        "lf_fast_path_active answers 1 for a plain-TCP connection",
        [("src/fastpath/api.c",
          "\treturn lf__sys_getpeername(fd, (void *)&ss, &l) == 0 ? 0 : -ENOTCONN;\n",
          "\treturn lf__sys_getpeername(fd, (void *)&ss, &l) == 0 ? 1 : -ENOTCONN;\n")],
        ["c:test-api:only_client_opted_in"]),
    # ---- issue 17: status counts and exclude (status)
    Mutant(
        "exclude-ignored-ipv6-listener",
        "LOOPFAST_EXCLUDE ignored for IPv6 listeners: an excluded [::1] listener gets its rendezvous",
        [("src/fastpath/listener.c",
          "\tbool excluded = r && lf__excluded(&ep);\n",
          "\tbool excluded = r && ep.family != AF_INET6 && lf__excluded(&ep);\n")],
        ["e2e:test_exclude.py -k 'v6-listener'"]),
    Mutant(
        "exclude-ipv6-entries-never-match",
        "an IPv6 entry of LOOPFAST_EXCLUDE ([ADDR6]:PORT) matches nothing, listener or destination",
        [("src/fastpath/exclude.c",
          "\t\tif (lf__ep_equal(&tab[i], ep))\n\t\t\treturn true;\n",
          "\t\tif (lf__ep_equal(&tab[i], ep) && ep->family != AF_INET6)\n\t\t\treturn true;\n")],
        ["e2e:test_exclude.py -k 'v6-listener-addr or v6-dest-addr'"]),
    Mutant(
        "status-busy-counted-fast",
        "`loopfast status` counts a \"rendezvous full\" fallback as fast",
        [("src/cli/status.c",
          "[LF_EV_BUSY] = { \"busy\", \"rendezvous full\", EV_TCP },",
          "[LF_EV_BUSY] = { \"busy\", \"rendezvous full\", EV_FAST },")],
        ["e2e:test_status.py -k 'count_rendezvous_full'"]),
    Mutant(
        "status-remembered-reason-not-opted-in",
        "a destination remembered for a second (rendezvous full, squatted, no listener) is counted as "
        "\"peer not opted in\" on the later connects",
        [("src/fastpath/connect.c",
          "\tif (cached >= 0) /* counted under the reason it was remembered for */\n"
          "\t\treturn plain((enum lf_event)cached, NULL, fd, &dst, NULL);\n",
          "\tif (cached >= 0) /* counted under the reason it was remembered for */\n"
          "\t\treturn plain(LF_EV_NO_RENDEZVOUS, NULL, fd, &dst, NULL);\n"),
         ("src/fastpath/connect.c",
          "\tif ((cached = neg_cached(&dst, &lst)) >= 0)\n"
          "\t\treturn plain((enum lf_event)cached, NULL, fd, &dst, NULL);\n",
          "\tif ((cached = neg_cached(&dst, &lst)) >= 0)\n"
          "\t\treturn plain(LF_EV_NO_RENDEZVOUS, NULL, fd, &dst, NULL);\n")],
        ["e2e:test_status.py -k 'count_rendezvous_full or count_no_listener or count_rendezvous_not'"]),
    Mutant(
        "status-excluded-counted-not-opted-in",
        "an excluded destination is counted as \"peer not opted in\"",
        [("src/fastpath/connect.c",
          "\t\treturn plain(LF_EV_EXCLUDED, NULL, fd, &dst, NULL);\n",
          "\t\treturn plain(LF_EV_NO_RENDEZVOUS, NULL, fd, &dst, NULL);\n")],
        ["e2e:test_status.py -k 'count_excluded'"]),
    # ---- issue 17: sockopt answers, exec, fdtab, benches (bench)
    Mutant(
        "sockopt-set-forgotten",
        "an option set on a fast-path socket (TCP_NODELAY, IP_TOS...) is not answered back: "
        "getsockopt gives TCP's default instead",
        [("src/fastpath/sockopt.c",
          "\t\tif ((at = rec_find(f, level, opt)) >= 0)\n",
          "\t\tif (0 && (at = rec_find(f, level, opt)) >= 0)\n")],
        ["e2e:test_compare.py -k 'sockopts-v4 or dup-v4' -m 'not extra'"]),
    Mutant(
        "exec-drops-loopfast",
        "a program exec'd with an opted-in listener open and a cleaned environment does not get loopfast "
        "back in LD_PRELOAD (it would take its rendezvous's clients as plain TCP)",
        [("src/preload/exec.c",
          "\tif (!atomic_load(&lf__rendezvous_inheritable) || !self[0])\n",
          "\tif (!atomic_load(&lf__rendezvous_inheritable) || self[0])\n")],
        ["e2e:test_inherit.py -k 'exec_keeps and listener'"]),
    Mutant(
        "fdtab-dup-drops-options",
        "dup/dup2/F_DUPFD of a fast-path socket does not carry the options set on it: the copy answers TCP's defaults",
        [("src/fastpath/fdtab.c",
          "\tmemcpy(dst->opt, src->opt, sizeof(dst->opt));\n\tdst->optset = src->optset;\n",
          "\tdst->optset = 0;\n")],
        ["e2e:test_compare.py -k 'sockopt-shared-v4' -m 'not extra'"]),
    Mutant(
        "fdtab-reset-keeps-options",
        "a closed socket's recorded options outlive it: the next fast-path socket given its fd number answers them",
        [("src/fastpath/fdtab.c",
          "\tf->optset = f->sockset = 0;\n",
          "\tf->sockset = 0;\n")],
        ["e2e:test_compare.py -k 'sockopts-v4 or sockopt-table-v4' -m 'not extra'"]),
    Mutant(
        "bench-latency-trusts-loopfast",
        "the latency bench takes lf_fast_path_active's word for the path instead of the kernel's",
        [("bench/latency/latency_run.c",
          "\ta = kpath_fast_end(fd, peer);\n",
          "\ta = lf_fast_path_active(fd) + 0 * peer;\n")],
        ["e2e:test_bench_latency.py -k lying"]),
    Mutant(
        "bench-connect-trusts-loopfast",
        "the connect bench takes lf_fast_path_active's word for the path at both ends instead of the kernel's",
        [("bench/connect/connect_run.c",
          "\t\t\t\t\t\tfast += kpath_fast_end(c, *client_pid) == 1;\n",
          "\t\t\t\t\t\tfast += lf_fast_path_active(c) == 1;\n"),
         ("bench/connect/connect_run.c",
          "\t\t\t\t\tfast += kpath_fast_end(s->fd, server) == 1;\n",
          "\t\t\t\t\tfast += lf_fast_path_active(s->fd) == 1;\n")],
        ["e2e:test_bench_connect.py -k lying"]),
    Mutant(
        "bench-tcp-counted-fast",
        "the benches' kernel check counts a TCP socket as a fast-path end",
        [("bench/common/kpath.c",
          "\tif (p == -ENOTCONN || p == 0)\n\t\treturn 0;",
          "\tif (p == -ENOTCONN || p == 0)\n\t\treturn 1;")],
        ["e2e:test_bench_connect.py -k 'client_only_verdict'"]),
    Mutant(
        "bench-apps-trusts-status",
        "bench app's verdict on a fast-path run takes loopfast status's server count instead of the kernel's",
        [("bench/apps/apps_fastpath.py",
          "    if proof[\"kernel_fast\"] < conns:\n",
          "    if proof[\"server_conns\"] < conns:\n")],
        ["e2e:test_apps_proof.py"]),
    # ---- issue 18: the signal wrapper (sig)
    Mutant(
        "sig-signal-always-restart",
        "a handler set by signal()/sysv_signal()/sigset() is wrapped with SA_RESTART whatever glibc and siginterrupt chose",
        [("src/fastpath/signals.c",
          "\telse if (is_handler(k.sa_handler))\n\t\tset_action(sig, &k, NULL);\n",
          "\telse if (is_handler(k.sa_handler)) {\n\t\tk.sa_flags |= SA_RESTART;\n\t\tset_action(sig, &k, NULL);\n\t}\n")],
        ["c:test-signals:signal_like_dispositions"]),
    Mutant(
        "sig-old-action-is-trampoline",
        "sigaction's old action reads back loopfast's trampoline instead of the application's handler",
        [("src/fastpath/signals.c",
          "\t\told->sa_sigaction = mine->sa_sigaction;\n",
          "\t\t(void)mine;\n")],
        ["c:test-signals:sigaction_dispositions,signal_like_dispositions"]),
    Mutant(
        "sig-counter-process-wide",
        "the handler counters are process-wide again: a handler on one thread ends another thread's spin with EINTR",
        [("src/fastpath/process.h",
          "#define LF_SIG_TLS __thread __attribute__((tls_model(\"initial-exec\")))\n",
          "#define LF_SIG_TLS\n")],
        ["c:test-signals"]),
    Mutant(
        "sig-dfl-siginfo-wrapped",
        "SIG_DFL set with SA_SIGINFO (Go's runtime before it re-raises) gets the trampoline, which calls a NULL handler",
        [("src/fastpath/signals.c",
          "\tif (!lf__spin_used || !act || !is_handler(act->sa_handler)) {\n",
          "\tif (!lf__spin_used || !act || (!is_handler(act->sa_handler) && !(act->sa_flags & SA_SIGINFO))) {\n")],
        ["e2e:test_signals.py -k 'SIGTERM'"], limit_s=900),
]

# ---- issue 17: kernel proofs and how programs end (pytests)
MUTANTS += [
    Mutant(
        "signal-trampoline-for-default",
        "a SIG_DFL or SIG_IGN set with SA_SIGINFO gets the signal trampoline, which calls address 0 or 1",
        [("src/fastpath/signals.c",
          "\tif (!lf__spin_used || !act || !is_handler(act->sa_handler)) {\n",
          "\tif (!lf__spin_used || !act || (!is_handler(act->sa_handler) && !(act->sa_flags & SA_SIGINFO))) {\n")],
        ["e2e:test_robust.py -k default_and_ignored", "compat:test_php_fpm.py -k signalled"]),
    # Under a flood that leaves room in a rendezvous of SOMAXCONN places,
    # a rendezvous of 64 is full: every legitimate client falls back to
    # plain TCP, and is served. The stress test's totals alone passed it.
    Mutant(
        "rendezvous-backlog-64",
        "the rendezvous listens with a backlog of 64: under a flood every client silently takes plain TCP",
        [("src/fastpath/listener.c",
          "lf__sys_listen(out[0], SOMAXCONN))",
          "lf__sys_listen(out[0], 64))")],
        ["e2e:test_stress.py -k 'thousand and 4'"]),
    # ---- issue 17: wildcard listeners and waits (probe)
    Mutant(
        "wildcard-listener-plain-tcp",
        "a listener on 0.0.0.0 or [::] gets no rendezvous: its clients silently take plain TCP",
        [("src/fastpath/listener.c",
          "\tif ((!lf__ep_is_loopback(&ep) && !lf__ep_is_any(&ep)) ||\n",
          "\tif (!lf__ep_is_loopback(&ep) ||\n")],
        ["e2e:test_compare.py -k 'names-any-v4 or names-dual-v4 or names-v6only-v6' -m 'not extra'"]),
    Mutant(
        "poll-timeout-in-microseconds",
        "a spinning poll gives the kernel the time left in microseconds where nanoseconds are due (ends 1000 times early)",
        [("src/fastpath/wait.c",
          "\t\tstruct timespec ts = ns_ts(left);\n\t\t*handled = true;\n",
          "\t\tstruct timespec ts = ns_ts(left / 1000);\n\t\t*handled = true;\n")],
        ["e2e-spin:test_compare.py -k 'readiness-v4' -m 'not extra'"]),
    Mutant(
        "spin-left-in-microseconds",
        "a spin that found nothing reports the time left to its wait in microseconds (poll, select, epoll_wait end early)",
        [("src/fastpath/spin.c",
          "\t\t*left_ns = timeout_ns - (int64_t)(now - start);\n",
          "\t\t*left_ns = (timeout_ns - (int64_t)(now - start)) / 1000;\n")],
        ["e2e-spin:test_compare.py -k 'readiness-v4' -m 'not extra'"]),
    Mutant(
        "select-sets-not-restored",
        "a select that spun in vain blocks on the sets its last try emptied: bytes that come later never wake it",
        [("src/fastpath/wait.c",
          "\tfor (int i = 0; i < 3; i++)\n\t\tif (a.sets[i])\n\t\t\t*a.sets[i] = a.saved[i];\n\tstruct timespec ts",
          "\tstruct timespec ts")],
        ["e2e-spin:test_compare.py -k 'readiness-v4' -m 'not extra'"]),
    Mutant(
        "client-name-server-address",
        "a client's name carries its own address where the server's is due: getpeername says 127.0.0.1 for 127.0.0.2",
        [("src/protocol/addrmap.c",
          "ep_addr(s, b, sizeof(b)), s->port, nonce",
          "ep_addr(c, b, sizeof(b)), s->port, nonce")],
        ["e2e:test_compare.py -k 'names-lo2-v4' -m 'not extra'"]),
    # ---- a port range full of TIME_WAIT (docs/connect.md)
    Mutant(
        "full-port-range-not-remembered",
        "a bind(0) that found no free port is not remembered: every connect to the destination walks the "
        "whole port range again before it goes plain",
        [("src/fastpath/connect.c",
          "fd, &dst, full ? &lst : NULL);\n",
          "fd, &dst, full ? NULL : NULL);\n")],
        ["e2e:test_cli.py -k full_port_range"]),
    # ---- issue 18: listeners that appear (life)
    Mutant(
        "life-refused-connect-remembered",
        "a refused connect (no listener) is remembered for the address, whatever listener appears there "
        "within the second",
        [("src/fastpath/connect.c",
          "\t\treturn plain(LF_EV_NO_LISTENER, \"no listener\", fd, &dst, NULL);\n",
          "\t\treturn lst.inode = 0, plain(LF_EV_NO_LISTENER, \"no listener\", fd, &dst, &lst);\n"),
         ("src/fastpath/connect.c",
          "\treturn i >= 0 && lf__sys_now_ns() - neg[i].checked_ns < NEG_TRUST_NS ? (int)neg[i].ev : -1;\n",
          "\treturn i >= 0 && (neg[i].ev == LF_EV_NO_LISTENER || lf__sys_now_ns() - neg[i].checked_ns < NEG_TRUST_NS) "
          "? (int)neg[i].ev : -1;\n")],
        ["e2e:test_lifecycle.py -k 'before_its_server or redis'"]),
    Mutant(
        "life-new-listener-inode-ignored",
        "the memory of a listener without a usable rendezvous ignores its inode: a server restarted under "
        "loopfast on the port where a squatted rendezvous was remembered gets plain TCP for a second",
        [("src/fastpath/connect.c",
          "\tif (neg[i].inode != lst->inode) {\n",
          "\tif (0 && neg[i].inode != lst->inode) {\n")],
        ["e2e:test_lifecycle.py -k rendezvous_was_taken"]),
    Mutant(
        "life-no-rendezvous-not-rechecked",
        "a remembered \"no rendezvous\" is not checked again: a listener whose socket survives (socket "
        "activation) gets plain TCP for a second after its new server made the rendezvous",
        [("src/fastpath/connect.c",
          "\tif (neg[i].ev == LF_EV_NO_RENDEZVOUS) {\n",
          "\tif (0 && neg[i].ev == LF_EV_NO_RENDEZVOUS) {\n")],
        ["e2e:test_lifecycle.py -k handed_to_a_new_server"]),
    Mutant(
        "life-rendezvous-after-listen",
        "a bound listener's rendezvous is made after the kernel's listen(): a client that retries until its "
        "server listens can arrive in between and take plain TCP",
        [("src/fastpath/listener.c",
          "|| !lf__ep_from_sockaddr(&ep, (void *)&ss, sl) || !ep.port)\n\t\treturn false;\n",
          "|| !lf__ep_from_sockaddr(&ep, (void *)&ss, sl) || ep.port || !ep.port)\n\t\treturn false;\n")],
        ["e2e:test_lifecycle.py -k many_files"]),
]

# ---- issue 19: the three attacks (attack)
MUTANTS += [
    Mutant(
        "vouched-same-uid",
        "a hello from the server's own uid is accepted unasked (protocol 3's shortcut), after a privilege drop too",
        [("src/fastpath/claim.c",
          "\tstruct lf_diag_sock d;\n\n\treturn lf__diag_socket(peer, local, &d) == 0 && d.uid == uid",
          "\tstruct lf_diag_sock d;\n\n\tif (uid == geteuid())\n\t\treturn true;\n"
          "\treturn lf__diag_socket(peer, local, &d) == 0 && d.uid == uid")],
        ["e2e:test_security.py -k trusts_no_hello_of_its_new_uid"]),
    Mutant(
        "stash-same-uid-exempt",
        "hellos of the server's own uid count against no share (a service account after a drop fills the stash)",
        [("src/fastpath/claim.c",
          "\t\tint r = lf__stash_put(l, u, &c, &s, h, false);\n",
          "\t\tint r = lf__stash_put(l, u, &c, &s, h, h.uid == geteuid());\n")],
        ["e2e:test_security.py -k gives_its_uid_only_a_share"]),
    Mutant(
        "stash-keeps-unconnected",
        "a stashed hello whose endpoint has no TCP connection to the listener is kept (the stash never asks)",
        [("src/fastpath/stash.c",
          "\tif (age < STASH_YOUNG_NS)\n",
          "\tif (1)\n")],
        ["e2e:test_security.py -k no_connection_are_dropped"]),
    Mutant(
        "stash-fd-limit-ignored",
        "the shares ignore RLIMIT_NOFILE and ETOOMANYREFS is a plain failure: one uid's hellos use up the "
        "server user's descriptors in flight",
        [("src/fastpath/stash.c",
          "\tif (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&",
          "\tif (0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 &&"),
         ("src/fastpath/stash.c",
          "\t\tif (errno != ETOOMANYREFS)\n\t\t\treturn -errno;\n",
          "\t\tif (1 || errno != ETOOMANYREFS)\n\t\t\treturn -errno;\n")],
        ["e2e:test_security.py -k descriptors_one_uid"]),

    # ---- issue 20: Registered I/O is a library of its own
    Mutant(
        "rio-lib-carries-the-fast-path",
        "libloopfast-rio is built as libloopfast was (the fast path's sources and export list with RIO's): "
        "a program that links it for RIO gets its socket calls interposed",
        [("CMakeLists.txt",
          "add_library(loopfast-rio SHARED ${LF_RIO_SOURCES})\n"
          "target_include_directories(loopfast-rio PUBLIC ${CMAKE_SOURCE_DIR}/include)\n",
          "add_library(loopfast-rio SHARED ${LF_RIO_SOURCES} ${LF_SOURCES})\n"
          "target_include_directories(loopfast-rio PUBLIC ${CMAKE_SOURCE_DIR}/include PRIVATE ${CMAKE_SOURCE_DIR}/src/fastpath)\n"
          "target_link_libraries(loopfast-rio PRIVATE loopfast-protocol ${CMAKE_DL_LIBS})\n"),
         ("CMakeLists.txt",
          "-Wl,--version-script=${CMAKE_SOURCE_DIR}/src/rio/loopfast-rio.map -Wl,-z,defs)",
          "-Wl,--version-script=${CMAKE_SOURCE_DIR}/src/loopfast.map -Wl,-z,defs)")],
        # Not the install test: the mutants' build makes only the targets
        # the subsets need, so `cmake --install` has no unit tests to copy.
        ["e2e:test_rio_lib.py -k 'not install'"]),
    Mutant(
        "rio-lib-not-a-dependency",
        "libloopfast no longer depends on libloopfast-rio: programs linked with -lloopfast when it held "
        "lf_rio_* stop finding them",
        [("CMakeLists.txt",
          "target_link_libraries(loopfast PRIVATE -Wl,--push-state,--no-as-needed loopfast-rio -Wl,--pop-state)\n",
          "")],
        ["e2e:test_rio_lib.py -k old_library"]),
    # ---- issue 20: the command's one dispatch table and one version
    Mutant(
        "cli-help-omits-last-of-group",
        "`loopfast --help` and `loopfast bench --help` leave out a group's last command (`bench connect`, "
        "as the help once did) though the table still runs it",
        [("src/cli/main.c",
          "\tfor (const struct cmd *c = tab; c->name; c++)\n\t\tif (c->sub)\n",
          "\tfor (const struct cmd *c = tab; c->name && (!group || c[1].name); c++)\n\t\tif (c->sub)\n")],
        ["e2e:test_cli.py -k help_lists_every_command"]),
    Mutant(
        "version-second-source",
        "CMake's project version is written in CMakeLists.txt again instead of read from loopfast.h: the "
        "pkg-config files and the libraries' names say 0.2.0 while `loopfast --version` says the header's",
        [("CMakeLists.txt",
          "project(loopfast VERSION ${LF_VERSION_MAJOR}.${LF_VERSION_MINOR}.${LF_VERSION_PATCH} LANGUAGES C)\n",
          "project(loopfast VERSION 0.2.0 LANGUAGES C)\n")],
        ["e2e:test_cli.py -k version_is_the_one"]),
]

MUTANTS += [
    # ---- what the negotiation issue left open (bell.c, listener.c; test-bell, test-stash)
    Mutant(
        "bell-reset-no-pollerr",
        "after a reset before its claim, poll and epoll say POLLHUP without POLLERR (TCP says POLLERR until the "
        "error is read)",
        [("src/fastpath/bell.c",
          "\t\t\tfds[i].revents |= POLLERR;\n",
          "\t\t\tfds[i].revents |= 0;\n"),
         ("src/fastpath/bell.c",
          "\t\t\t\t\t\tev[k].events |= EPOLLERR;\n",
          "\t\t\t\t\t\tev[k].events |= 0;\n")],
        ["c:test-bell:reset_by_bell_pollerr_until_so_error,reset_by_bell_pollerr_until_read"]),
    Mutant(
        "error-taken-twice",
        "the error a fast-path socket reports once is read, then cleared (two threads can both get it)",
        [("src/fastpath/bell.c",
          "\tint e = f ? __atomic_exchange_n(&f->pend_err, 0, __ATOMIC_ACQ_REL) : 0;\n",
          "\tint e = f ? f->pend_err : 0;\n\tif (e)\n\t\tf->pend_err = 0;\n")],
        ["c:test-bell:error_taken_once"]),
    Mutant(
        "stash-unkeyed",
        "the stash index's key is zero: every listener puts an endpoint in the same slots, which a peer can compute",
        [("src/fastpath/stash.c",
          "\tm->keyed = 1;\n",
          "\tm->key[0] = m->key[1] = 0;\n\tm->keyed = 1;\n")],
        ["c:test-stash"]),
    Mutant(
        "bell-epoll-no-slices",
        "after a fork, epoll waits are not cut in slices: a child that closed its copy takes the bell's one-shot "
        "event and the parent never hears its connection end",
        [("src/fastpath/bell.c",
          "\tif (!__atomic_load_n(&bells_shared, __ATOMIC_RELAXED))\n\t\treturn false;\n",
          "\tif (1)\n\t\treturn false;\n")],
        ["c:test-bell:fork_epoll_child_closed"]),
    Mutant(
        "stash-vouches-any-listener",
        "a stashed hello counts as vouched for whatever listener its named connection goes to: one uid keeps the "
        "whole stash with hellos naming its own connections to a decoy listener on the same port",
        [("src/fastpath/listener.c",
          "\tif (lf__ep_equal(server, &l->ep))\n\t\treturn true;\n",
          "\tif (1)\n\t\treturn true;\n")],
        ["e2e:test_security.py -k 'decoy and loopfast and loopback'"]),
    Mutant(
        "client-announces-foreign-socket",
        "a client announces a TCP socket that another uid owns (made before a privilege drop): the server cannot "
        "vouch for it and the client is reset",
        [("src/fastpath/connect.c",
          "\tif (fstat(fd, &st) || st.st_uid != geteuid())\n",
          "\tif (fstat(fd, &st))\n")],
        ["e2e:test_security.py -k 'before_a_privilege_drop'"]),
]

# Versions (issue 19): the shared page's header, and a listener that an
# older version's process serves too.
MUTANTS += [
    Mutant(
        "page-magic-unchecked",
        "a shared page of this version's name is adopted whatever its magic (a forged or foreign page is used)",
        [("src/fastpath/listener.c",
          "\tbool ours = p->magic == LF_PAGE_MAGIC;\n",
          "\tbool ours = true;\n")],
        ["e2e:test_versions.py -k forged"]),
    Mutant(
        "page-version-unchecked",
        "a shared page with this version's magic is adopted whatever its version (another layout is used)",
        [("src/fastpath/listener.c",
          "\tours = ours && p->version == LF_PROTO_VERSION;\n",
          "\tours = ours && (p->version == LF_PROTO_VERSION || 1);\n")],
        ["e2e:test_versions.py -k forged"]),
    Mutant(
        "versions-other-rendezvous-ignored",
        "a listener inherited from an older version's process gets this version's rendezvous too: each "
        "version's clients lose the connections the other version's process accepts",
        [("src/fastpath/listener.c",
          "\tif (r && !excluded && other_version(family, l->ino, st.st_uid)) {\n",
          "\tif (0 && r && !excluded && other_version(family, l->ino, st.st_uid)) {\n")],
        ["e2e:test_versions.py -k 'inherited and not new-old'"]),
    Mutant(
        "claim-spare-not-given-up-at-emfile",
        "a server at its descriptor limit does not give up its spare descriptor when the hello's accept says "
        "EMFILE (the spare is kept across claims and given up only then)",
        [("src/fastpath/claim.c",
          "\t\tif (u < 0 && (errno == EMFILE || errno == ENFILE) && !*released) {\n",
          "\t\tif (0 && u < 0 && (errno == EMFILE || errno == ENFILE) && !*released) {\n")],
        ["e2e:test_compare.py -k fd-limit -m 'not extra'"], limit_s=30),
    Mutant(
        "claim-ignores-listener-linger",
        "a linger set on the listener where loopfast cannot see it is not noticed when the listener is opted in: "
        "the claim closes the doorbell with a reset, which drops the claim's mark",
        [("src/fastpath/listener.c",
          "\tif (lf__sys_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0 && lg.l_onoff)\n",
          "\tif (0 && lf__sys_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0 && lg.l_onoff)\n")],
        ["e2e:test_compare.py -k listener-linger -m 'not extra'"]),
    Mutant(
        "switch-nonblock-from-any-answer",
        "the switch takes every connect as non-blocking (not only one that answered EINPROGRESS without a send "
        "timeout): a blocking client's fast-path socket reads EAGAIN",
        [("src/fastpath/connect.c",
          "\tif (e == EINPROGRESS && !(f->sockset & 2u) /* lf__carried[1] is SO_SNDTIMEO */)\n",
          "\tif (1 || (e == EINPROGRESS && !(f->sockset & 2u)))\n")],
        ["e2e:test_compare.py -k 'fd-limit-v4 or prefork-v4 or exec-v4' -m 'not extra'"]),
]

MUTANTS += [
    # ---- the SOL_LOOPFAST socket option and --per-socket (api.c, signals.c, run.c; issue 22)
    Mutant(
        "sockopt-yes-after-connect",
        "LOOPFAST_FAST_PATH 1 on a connected socket answers success (nothing was done: the path was chosen)",
        [("src/fastpath/api.c",
          "\t\treturn v ? local_lf_enable_fast_path(fd) : opt_out(fd);\n",
          "\t\treturn v ? (local_lf_enable_fast_path(fd) == -EISCONN ? 0 : local_lf_enable_fast_path(fd)) : opt_out(fd);\n")],
        ["e2e:test_sockopt.py -k per_socket_answers"]),
    Mutant(
        "sockopt-opt-out-noop",
        "LOOPFAST_FAST_PATH 0 answers success and changes nothing: under whole-process loopfast run the socket "
        "still takes the fast path",
        [("src/fastpath/api.c",
          "\t\tatomic_fetch_and(&f->flags, ~LF_F_OPTIN);\n\t\tatomic_fetch_or(&f->flags, LF_F_NOFAST);\n",
          "\t\t(void)0;\n")],
        ["e2e:test_sockopt.py -k whole_process"]),
    Mutant(
        "sockopt-listener-always-yes",
        "getsockopt on a listener answers 1 whether or not it serves the fast path",
        [("src/fastpath/api.c",
          "\t\t\tv = f->lst != NULL;\n",
          "\t\t\tv = 1;\n")],
        ["e2e:test_sockopt.py -k per_socket_answers"]),
    Mutant(
        "per-socket-opts-in-everything",
        "loopfast run --per-socket opts every socket in, as the default mode does",
        [("src/cli/run.c",
          "\t\t\tmode = \"per-socket\";\n",
          "\t\t\tmode = \"1\";\n")],
        ["e2e:test_python_pkg.py -k blocking"]),
    Mutant(
        "optin-leaves-handlers-unwrapped",
        "the first per-socket opt-in does not wrap the handlers installed before it: Python's SIGINT handler "
        "runs, but loopfast's wait on the bell never sees it and the blocking recv goes on",
        [("src/fastpath/signals.c",
          "\tfor (int sig = 1; sig < _NSIG; sig++)\n",
          "\tfor (int sig = 1; sig < 0; sig++)\n")],
        ["e2e:test_sockopt.py -k ctrl_c"]),
    Mutant(
        "optin-while-connecting",
        "a connect in progress (SYN_SENT, getpeername ENOTCONN) counts as not connected: opting in answers success "
        "and does nothing",
        [("src/fastpath/api.c",
          "\treturn *st < 0 || (*st != TCP_CLOSE && *st != TCP_LISTEN);\n",
          "\treturn *st < 0 || (*st != TCP_CLOSE && *st != TCP_LISTEN && *st != TCP_SYN_SENT);\n")],
        ["e2e:test_sockopt.py -k per_socket_answers"]),
]

# A client that wrote and closed before a busy server accepted (issue 19,
# attack 2's last sentence): its closed TCP end must stay a full socket
# that sock_diag reports with its owner, whatever the two ends' uids.
MUTANTS += [
    Mutant(
        "linger2-other-uid-only",
        "TCP_LINGER2 only for a server of another uid (as before the fix): a same-uid client's closed end "
        "becomes a TIME_WAIT entry (uid 0) or nothing when the TIME_WAIT table is full, and its request is lost",
        [("src/fastpath/connect.c",
          "\tlf__sys_setsockopt(fd, IPPROTO_TCP, TCP_LINGER2, &linger2, sizeof(linger2));\n",
          "\tif (lst.uid != geteuid())\n"
          "\t\tlf__sys_setsockopt(fd, IPPROTO_TCP, TCP_LINGER2, &linger2, sizeof(linger2));\n")],
        ["e2e:test_security.py -k 'wrote_and_closed and loopfast'"]),
]

# The fd table calls nothing above it (issue 20): what an entry's reset
# must release is what the layers above registered.
MUTANTS += [
    Mutant(
        "fdtab-reset-skips-drops",
        "a closed fd's pending connect or bell is never released: lf__fd_reset ignores the registered hooks",
        [("src/fastpath/fdtab.c",
          "\t\tif (atomic_load(&f->flags) & bit)\n\t\t\tdrop_fn[__builtin_ctz(bit)](fd);\n",
          "\t\tif (0 && (atomic_load(&f->flags) & bit))\n\t\t\tdrop_fn[__builtin_ctz(bit)](fd);\n")],
        ["c:test-fdtab"], limit_s=60),
]

# The seccomp supervisor of `loopfast run` (src/cli/supervise*.c, issue 21;
# the client's side in supervise_client.c), each against test_supervisor.py.
MUTANTS += [
    Mutant(
        "supervisor-continues-every-connect",
        "the supervisor leaves every trapped connect to the kernel: a static or Go client stays on plain TCP",
        [("src/cli/supervise_client.c",
          "\t    !sv_valid(lfd, n->id) || !lf__ep_from_sockaddr(&dst, (void *)&ss, len) || !lf__ep_is_loopback(&dst))\n",
          "\t    !sv_valid(lfd, n->id) || !lf__ep_from_sockaddr(&dst, (void *)&ss, len) || 1)\n")],
        ["e2e:test_supervisor.py -k 'test_fast_path and c-nb'"]),
    Mutant(
        "supervisor-names-unix",
        "getsockname/getpeername on a supervised fast-path socket are the kernel's: the Unix socket's names",
        [("src/cli/supervise_client.c",
          "\tif (r || ss.ss_family == AF_UNIX || !sv_valid(lfd, n->id))\n",
          "\tif (1 || r || ss.ss_family == AF_UNIX || !sv_valid(lfd, n->id))\n")],
        ["e2e:test_supervisor.py -k 'test_fast_path and go'"]),
    Mutant(
        "supervisor-negotiates-nested-preload",
        "the supervisor negotiates the doorbell of a process that has the preload too (two hellos)",
        [("src/cli/supervise_client.c",
          "== 0 && mss == LF_HELLO_MSS;\n",
          "== 0 && mss == LF_HELLO_MSS && 0;\n")],
        ["e2e:test_supervisor.py -k nested"]),
    Mutant(
        "supervisor-sockopt-unix",
        "getsockopt SO_DOMAIN/SO_PROTOCOL on a supervised fast-path socket is the kernel's: AF_UNIX, 0",
        [("src/cli/supervise_sockopt.c",
          "\tbool fast = dom == AF_UNIX && (was_switched(ino) || lf_fast_path_active(copy) == 1);\n",
          "\tbool fast = dom == -2 && (was_switched(ino) || lf_fast_path_active(copy) == 1);\n")],
        ["e2e:test_supervisor.py -k 'test_fast_path and c-nb'"]),
]

MUTANTS += [
    Mutant(
        "poison-matches-the-endpoint-only",
        "a dropped hello's poison entry is matched on the endpoint alone: another uid's entry for the same "
        "endpoint decides whether its owner's connection is reset",
        [("src/fastpath/stash.c",
          "|| (uid && m->poison[i].uid != *uid))",
          "|| (uid && 0))")],
        ["c:test-stash"]),
]

# The SOL_LOOPFAST option's orders (adversarial review): an option the fast
# path cannot keep set before the opt-in, an opt-out undone by an opt-in.
MUTANTS += [
    Mutant(
        "optin-after-pinned-option",
        "an opt-in after SO_ZEROCOPY/TCP_INQ (the per-socket order) says yes and the connection loses the option "
        "(MSG_ZEROCOPY's completion never comes)",
        [("src/fastpath/api.c",
          "\tif (!f || (atomic_load(&f->flags) & LF_F_PINNED))\n",
          "\tif (!f)\n")],
        ["e2e:test_sockopt_edges.py -k cannot_keep"]),
    Mutant(
        "optin-keeps-optout",
        "SOL_LOOPFAST 0 then 1 before listen: the listener says 1 and gets no rendezvous",
        [("src/fastpath/api.c",
          "\tatomic_fetch_and(&f->flags, ~LF_F_NOFAST); /* an opt-out before",
          "\tatomic_fetch_and(&f->flags, ~0u); /* an opt-out before")],
        ["e2e:test_sockopt_edges.py -k opt_out_then_in"]),
    Mutant(
        "accepted-ignores-listener-spin",
        "LOOPFAST_SPIN set on a listener says yes and its accepted sockets get none",
        [("src/fastpath/connect.c",
          "\t\tf->spin_us = src->spin_us ? src->spin_us : lf__global_spin_us;\n",
          "\t\tf->spin_us = lf__global_spin_us;\n")],
        ["e2e:test_sockopt_edges.py -k spin_set_on_a_listener"]),
    # ---- the architecture issue's last items (man pages' version)
    Mutant(
        "man-page-version-stale",
        "a man page's .TH line names another version than include/loopfast.h's (a bump that missed a page)",
        [("man/loopfast.7",
          '" "Miscellaneous"',
          '.9" "Miscellaneous"')],
        ["e2e:test_cli.py -k version_is_the_one"]),
]

# The shared-memory tier (src/protocol/ring.c, src/fastpath/shm.c and shm_io.c, issue
# 23's first cut), each against test-ring or test_shm.py.
MUTANTS += [
    Mutant(
        "shm-ring-trusts-tail",
        "the ring reader takes the peer's tail as it is: garbage more than a ring ahead is read as data",
        [("src/protocol/ring.c",
          "\treturn n > size ? LF_RING_BAD : (long)n;\n",
          "\treturn (long)n;\n")],
        ["c:test-ring"], limit_s=120),
    Mutant(
        "shm-server-answers-yes-unasked",
        "a server whose listener did not ask for the tier still gives it to a client that did",
        [("src/fastpath/shm.c",
          "\tif (fd > LF_SHM_STDIO_MAX && (lf__shm_global || (l && (atomic_load(&l->flags) & LF_F_TIER))))\n",
          "\tif (1)\n")],
        ["e2e:test_shm.py -k only_when_both_asked"]),
    Mutant(
        "shm-reader-keeps-token",
        "a reader that emptied its ring leaves the token on the socket: readable with nothing to read",
        [("src/fastpath/shm_io.c",
          "\t\treturn 0; /* the token stays, for the bytes now there */\n\tint r = take_token(c, fd);\n",
          "\t\treturn 0; /* the token stays, for the bytes now there */\n\tint r = 0;\n")],
        ["e2e:test_shm.py -k every_byte_arrives"]),
    Mutant(
        "shm-poll-writable-when-full",
        "poll reports POLLOUT on a tier socket whose ring is full (the Unix socket's answer): a write then gets EAGAIN",
        [("src/fastpath/shm.c",
          "\tif (st == ON && (p->events & (POLLOUT | POLLWRNORM)) && !atomic_load(&c->tx_left) && space_now(c) == 0) {\n",
          "\tif (0 && st == ON && (p->events & (POLLOUT | POLLWRNORM)) && !atomic_load(&c->tx_left) && space_now(c) == 0) {\n")],
        ["e2e:test_shm.py -k poll"]),
]
# The supervisor's server side (src/cli/supervise_server.c), against
# test_supervisor.py.
MUTANTS += [
    Mutant(
        "supervisor-parked-accept-ignores-signals",
        "a blocking accept parked in the supervisor is never interrupted for the program's signal handler",
        [("src/cli/supervise_server.c",
          "\t\t} else if (sv_handler_due(parks[i].pid)) {\n",
          "\t\t} else if (0 && sv_handler_due(parks[i].pid)) {\n")],
        ["e2e:test_supervisor.py -k 'test_blocking_accept_signal and eintr'"]),
    Mutant(
        "supervisor-keeps-closed-listeners",
        "the supervisor never lets go of a listener the program closed: its port stays taken",
        [("src/cli/supervise_server.c",
          "\tclose(held[i].copy);\n\theld[i].copy = -1;\n",
          "")],
        ["e2e:test_supervisor.py -k test_listener_made_again"]),
]

# The shared-memory tier against a peer of another uid that writes
# garbage into the rings (test_security.py, docs/security.md).
MUTANTS += [
    Mutant(
        "shm-reader-trusts-bell",
        "a tier reader takes a bell word of any value as set: a peer's garbage bell is cleared, not a reset",
        [("src/fastpath/shm_io.c",
          "\tif (b != 1)\n\t\treturn LF_RING_BAD;\n\tif (linger && lf__shm_spin_linger(c))\n",
          "\tif (linger && lf__shm_spin_linger(c))\n")],
        ["e2e:test_security.py -k 'garbage_in_the_rings and bell'"]),
    Mutant(
        "shm-reader-swallows-stray-token",
        "a tier reader drops a token byte that no push explains instead of resetting the connection",
        [("src/fastpath/shm_io.c",
          "\t\tif (stray && !owed)\n\t\t\treturn lf__shm_broken(c, fd);",
          "\t\tif (stray && !owed) {\n\t\t\tlf__sys_recvfrom(fd, &b, 1, MSG_DONTWAIT, NULL, NULL);\n"
          "\t\t\terrno = EAGAIN;\n\t\t\treturn -1;\n\t\t}")],
        ["e2e:test_security.py -k 'garbage_in_the_rings and token'"]),
    Mutant(
        "shm-writer-trusts-head",
        "the ring writer takes the peer's head as it is: a head far ahead reads as room, not a reset",
        [("src/protocol/ring.c",
          "\treturn used > r->size ? LF_RING_BAD : used >= r->limit ? 0 : (long)(r->limit - used);\n",
          "\treturn (long)(r->limit - used);\n")],
        ["e2e:test_security.py -k 'garbage_in_the_rings and room'"]),
]

# The shared-memory tier's edges for epoll ET (shm_io.c, docs/shm.md "Edges").
MUTANTS += [
    Mutant(
        "shm-no-edge-per-push",
        "a tier writer sends no edge byte for a push into a non-empty ring: epoll ET gets one edge per ring fill, not one per write",
        [("src/fastpath/shm_io.c",
          "\t\tif (!full && atomic_load_explicit(&c->tx.h->edges, memory_order_relaxed))\n",
          "\t\tif (0 && atomic_load_explicit(&c->tx.h->edges, memory_order_relaxed))\n")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and readiness'", "e2e:test_shm.py -k edge_per_write"]),
    Mutant(
        "shm-edges-left-after-token",
        "a tier reader that takes its token leaves the edge bytes of pushes it has read: epoll says readable with nothing to read",
        [("src/fastpath/shm_io.c",
          "\t\t\tlf__shm_io_skip_edges(c, fd, &b); /* those of pushes this reader has read */\n",
          "")],
        ["e2e:test_shm.py -k edge_per_write"]),
]
# The supervisor's checks before it switches a socket (src/cli/supervise.c),
# against test_supervisor_security.py.
MUTANTS += [
    Mutant(
        "supervisor-ignores-network-namespace",
        "the supervisor negotiates a socket of another network namespace in its own: another uid's listener there "
        "takes the connection (the library's own check, which the supervisor's connect also passes, removed too)",
        [("src/cli/supervise.c",
          "\tif (!same_netns(copy, pid)) {\n",
          "\tif (0 && !same_netns(copy, pid)) {\n"),
         ("src/fastpath/connect.c",
          "\tif (!lf__diag_same_netns(fd))\n",
          "\tif (0)\n")],
        ["e2e:test_supervisor_security.py -k test_program_in_its_own_network_namespace_keeps_its_connection"]),
    Mutant(
        "supervisor-switches-pinned-socket",
        "the supervisor switches a socket on which an option the fast path cannot keep is on (SO_ZEROCOPY): its completion never comes",
        [("src/cli/supervise.c",
          "\tif ((pin = lf__sopt_pinned_on(copy))) {\n",
          "\tif (0 && (pin = lf__sopt_pinned_on(copy))) {\n")],
        ["e2e:test_supervisor_security.py -k test_option_the_fast_path_cannot_keep_stays_tcp"]),
]

# A socket of another network namespace (issue 19's threat model: a listener
# of another uid in the namespace the look-up saw takes the connection).
MUTANTS += [
    Mutant(
        "connect-ignores-network-namespace",
        "the preload negotiates a loopback connect of a socket made in another network namespace",
        [("src/fastpath/connect.c",
          "\tif (!lf__diag_same_netns(fd))\n",
          "\tif (0)\n"),
         ("src/fastpath/connect.c",
          "\tif (!lf__diag_same_netns(unx)) {",
          "\tif (0) {")],
        ["e2e:test_security.py -k another_network_namespace"]),
]

# loopfast run under systemd and set-uid programs under a user's supervisor
# (src/cli/supervise.c, issue 21, sv-real).
MUTANTS += [
    Mutant(
        "supervisor-forgets-mainpid",
        "--notify-mainpid sends nothing: a Type=notify unit with NotifyAccess=main never takes the program's READY=1",
        [("src/cli/supervise.c",
          "\tif (mainpid)\n\t\tnotify_mainpid(pid);\n",
          "\tif (0 && mainpid)\n\t\tnotify_mainpid(pid);\n")],
        ["compat:test_caddy.py -k 'notify_socket and mainpid and not preload'"]),
    Mutant(
        "supervisor-setuid-exec-silent",
        "a set-uid program run under a user's supervisor loses its privilege without a word",
        [("src/cli/supervise.c",
          "\t\tif (stat(full, &st) == 0 && S_ISREG(st.st_mode) &&\n",
          "\t\tif (0 && stat(full, &st) == 0 && S_ISREG(st.st_mode) &&\n")],
        ["e2e:test_supervisor.py -k setuid_root"]),
]

# The supervisor's held connect and parked accept against TCP's answers
# (test_supervisor_connect.py).
MUTANTS += [
    Mutant(
        "supervisor-connect-ignores-signals",
        "a blocking connect held by the supervisor is not interrupted by a signal for a handler: no EINTR, "
        "the handler runs only once the handshake ends",
        [("src/cli/supervise_client.c",
          "\t\t} else if (pends[i].blocking && sv_handler_due(pends[i].n.pid)) {\n",
          "\t\t} else if (0) {\n")],
        ["e2e:test_supervisor_connect.py -k 'eintr or restart'"]),
    Mutant(
        "supervisor-connect-interrupt-eintr",
        "an interrupted held connect answers EINTR itself, not ERESTARTSYS: under SA_RESTART the program sees EINTR",
        [("src/cli/supervise_client.c",
          "\t\t\tgive_up(lfd, ep, i, -SV_ERESTARTSYS);\n",
          "\t\t\tgive_up(lfd, ep, i, -EINTR);\n")],
        ["e2e:test_supervisor_connect.py -k restart"]),
    Mutant(
        "supervisor-connect-raw-so-error",
        "a held blocking connect that is refused answers the kernel's SO_ERROR, which the library's poll has read: 0",
        [("src/cli/supervise_client.c",
          "\t\tgetsockopt(copy, SOL_SOCKET, SO_ERROR, &err, &el);\n",
          "\t\tsyscall(SYS_getsockopt, tcp, SOL_SOCKET, SO_ERROR, &err, &el);\n")],
        ["e2e:test_supervisor_connect.py -k refused"]),
    Mutant(
        "supervisor-accept-ignores-rcvtimeo",
        "a parked accept waits past its listener's SO_RCVTIMEO",
        [("src/cli/supervise_server.c",
          "\t\t} else if (parks[i].deadline && lf__sys_now_ns() / 1000000 >= parks[i].deadline) {\n",
          "\t\t} else if (0) {\n")],
        ["e2e:test_supervisor_connect.py -k rcvtimeo"]),
]

MUTANTS += [
    Mutant(
        "supervisor-listener-options-not-carried",
        "options a supervised program set on its listener are not carried to the claimed Unix sockets",
        [("src/cli/supervise_server.c",
          "\tsv_note_options(copy);\n",
          "")],
        ["e2e:test_supervisor_connect.py -k inherited"]),
]

MUTANTS += [
    Mutant(
        "supervisor-client-options-not-carried",
        "options a supervised client set before its connect stay on the TCP socket, not the Unix socket that replaces it",
        [("src/cli/supervise_client.c",
          "\tsv_note_options(copy);\n",
          "")],
        ["e2e:test_supervisor_connect.py -k client_options_carried"]),
]

# sendfile and splice on the shared-memory tier (shm_splice.c, docs/shm.md
# "sendfile and splice").
MUTANTS += [
    Mutant(
        "shm-sendfile-bypasses-ring",
        "sendfile and splice on a tier socket go to the kernel's, past the rings (the reader takes file bytes for tokens)",
        [("src/fastpath/shm_splice.c",
          "\tif (!lf__shm_on(out) || !count)\n",
          "\tif (1)\n"),
         ("src/fastpath/shm_splice.c",
          "\tif ((!from && !to) || !len ",
          "\tif (1 || (!from && !to) || !len ")],
        ["e2e:test_shm.py -k sendfile"]),
    Mutant(
        "shm-sendfile-keeps-file-position",
        "sendfile without an offset on a tier socket leaves the file's position where it was",
        [("src/fastpath/shm_splice.c",
          "\telse\n\t\tlseek(in, pos + (off_t)total, SEEK_SET);\n",
          "\telse\n\t\tlseek(in, pos, SEEK_SET);\n")],
        ["e2e:test_shm.py -k sendfile"]),
]

# select and pselect on the shared-memory tier (wait.c select_tiered).
MUTANTS += [
    Mutant(
        "shm-select-sees-the-socket",
        "select and pselect on a tier socket answer from the Unix socket (writable with the ring full, readable for the server's answer)",
        [("src/fastpath/wait.c",
          "\tif (lf__shm_used && select_tiered(n, r, w, e, timeout, NULL, &ret)) {\n",
          "\tif (0) {\n"),
         ("src/fastpath/wait.c",
          "\tif (lf__shm_used && select_tiered(n, r, w, e, t, mask, &ret))\n",
          "\tif (0)\n")],
        ["e2e:test_shm.py -k select"]),
]

# RIO and the shared-memory tier (src/rio/rio_rq.c shm_tier, the public
# query getsockopt(SOL_LOOPFAST, LOOPFAST_TIER) in api.c and shm.c).
MUTANTS += [
    Mutant(
        "rio-takes-shm-tier-socket",
        "RIO makes a request queue on a tier socket: io_uring's bytes go on the Unix stream, past the rings",
        [("src/rio/rio_rq.c",
          "\tif (type == SOCK_STREAM && (ret = shm_tier(fd)) != 0)\n",
          "\tif (0)\n")],
        ["e2e:test_rio_lib.py -k refuses"]),
    Mutant(
        "tier-query-says-shm-over-plain-tcp",
        "getsockopt LOOPFAST_TIER says LF_TIER_SHM on a plain TCP connection whose socket asked for the tier (RIO refuses it)",
        [("src/fastpath/api.c",
          "\t\tif (r == 0 && chosen(fd, &st) && ",
          "\t\tif (0 && chosen(fd, &st) && ")],
        ["e2e:test_rio_lib.py -k refuses"]),
]

# SCM_RIGHTS of a socket on the shared-memory tier (shm.c lf__shm_in_rights).
MUTANTS += [
    Mutant(
        "shm-socket-passes-without-its-rings",
        "sendmsg passes a socket on the tier with SCM_RIGHTS (the receiver would read tokens as data)",
        [("src/fastpath/io.c",
          "\t\tif (m && m->msg_controllen && lf__shm_used) /* a tier socket goes with its rings, or not at all (shm_pass.c) */\n",
          "\t\tif (0)\n")],
        ["e2e:test_shm.py -k passing"]),
]

# The shared-memory tier's spin without system calls (shm_spin.c, docs/shm.md
# "Spinning"): the writer's hand-off to a polling reader and the reader's
# quiet answers, each against test_shm.py.
MUTANTS += [
    Mutant(
        "shm-writer-skips-token-for-polling-reader",
        "a tier writer whose reader was polling skips the token without waiting for the reader to take the bytes: a reader that went to sleep in epoll_wait is never woken",
        [("src/fastpath/shm_spin.c",
          "\t\tif ((int64_t)(atomic_load_explicit(&c->tx.h->taken, memory_order_relaxed) - t) >= 0)\n\t\t\treturn true;\n",
          "\t\treturn true;\n")],
        ["e2e:test_shm.py -k stopped_polling"]),
    Mutant(
        "shm-give-back-wakes-no-writer",
        "a give-back made where no token is taken (a ping-pong's handed-off pushes) wakes no writer that met it: "
        "the writer sleeps out its 20 ms slice",
        [("src/fastpath/shm_mem.c",
          "\tlf__shm_wake_writer(c); /* one that met the give-back",
          "\t(void)c; /* one that met the give-back")],
        ["c:test-shm:a_give_back_wakes_a_writer_that_waits_for_it"]),
    Mutant(
        "shm-forget-looks-without-the-lock",
        "a close that frees a connection looks at its place on the due list without the list's lock: a sweep "
        "that took it off punches and wakes through a freed connection and an unmapped page",
        [("src/fastpath/shm_mem.c",
          "void lf__shm_mem_forget(struct lf_shm_conn *c)\n{\n",
          "void lf__shm_mem_forget(struct lf_shm_conn *c)\n{\n\tif (!c->due_prev)\n\t\treturn;\n")],
        ["c:test-shm:a_close_waits_for_a_sweep_of_its_ring"]),
    Mutant(
        "shm-poll-again-always",
        "every non-blocking read of an empty tier ring looks at it for a while before EAGAIN, also an event loop's "
        "last read of an event",
        [("src/fastpath/shm_spin.c",
          "bool again = now - c->polled_ns < AGAIN_NS;",
          "bool again = true;")],
        ["c:test-shm:a_first_poll_answers_without_looking"]),
    Mutant(
        "shm-poll-again-ignores-what-came",
        "a polling read's look before EAGAIN answers EAGAIN over bytes that are in the ring",
        [("src/fastpath/shm_spin.c",
          "\treturn true;\n}\n\nvoid lf__shm_spin_looked",
          "\treturn false;\n}\n\nvoid lf__shm_spin_looked")],
        ["c:test-shm:a_poll_again_takes_what_came"]),
    Mutant(
        "shm-quiet-after-a-wait",
        "a tier reader's non-blocking read answers EAGAIN from its ring alone after a wait (epoll) that reported the end",
        [("src/fastpath/shm_spin.c",
          "\t    c->looked_waits != atomic_load_explicit(&lf__shm_waits, memory_order_acquire))\n",
          "\t    0)")],
        ["c:test-shm:a_wait_ends_it", "e2e:test_shm.py -k 'sees_the_end_at_once and not close'"]),
    Mutant(
        "shm-quiet-after-peer-close",
        "a tier reader's non-blocking read answers EAGAIN from its ring alone after the peer closed (the page's fin word unread)",
        [("src/fastpath/shm_spin.c",
          "\t    atomic_load_explicit(&c->rx.h->fin, memory_order_relaxed) || ",
          "\t    ")],
        ["c:test-shm:the_peers_fin_ends_it", "e2e:test_shm.py -k 'sees_the_end_at_once and close'"]),
    Mutant(
        "shm-quiet-across-threads",
        "a tier reader's quiet read answers EAGAIN in any thread, whose signals the last look never counted",
        [("src/fastpath/shm_spin.c",
          "c->looked_thread != (const void *)&lf__sig_seen ||",
          "0 ||")],
        ["c:test-shm:another_thread_is_not_quiet"]),
    Mutant(
        "shm-quiet-after-a-signal",
        "a tier reader's quiet read answers EAGAIN after its thread handled a signal (whose handler may have been told of the end)",
        [("src/fastpath/shm_spin.c",
          "\t    c->looked_sig != atomic_load_explicit(&lf__sig_seen, memory_order_relaxed) ||\n",
          "\t    0 ||\n")],
        ["c:test-shm:a_signal_ends_it"]),
    Mutant(
        "shm-quiet-forever",
        "a tier reader that polls never looks at its socket again: a killed peer's end is never seen",
        [("src/fastpath/shm_spin.c",
          "\treturn now - c->looked_ns < LOOK_NS;\n",
          "\treturn true;\n")],
        ["e2e:test_shm.py -k killed_peer"]),
]

# The supervisor's answer to connect on a socket it has switched
# (test_supervisor_compare.py: the matrix with a -static probe).
MUTANTS += [
    Mutant(
        "supervisor-connect-again-unix",
        "connect again on a supervised fast-path socket is the kernel's (the Unix socket's EINVAL), not TCP's",
        [("src/cli/supervise_client.c",
          "\tif (copy >= 0 && sv_domain(copy) == AF_UNIX && lf_fast_path_active(copy) == 1) {\n",
          "\tif (0 && copy >= 0 && sv_domain(copy) == AF_UNIX && lf_fast_path_active(copy) == 1) {\n")],
        ["e2e:test_supervisor_compare.py -k 'test_supervised_core and connect-nonblock'"]),
    Mutant(
        "supervisor-connect-again-no-zero",
        "connect again after EINPROGRESS on a supervised fast-path socket says EISCONN at once (TCP: 0 once)",
        [("src/cli/supervise_client.c",
          "\t\t\ttold_inprogress[i] = 0;\n\t\t\treturn 0;\n",
          "\t\t\ttold_inprogress[i] = 0;\n\t\t\treturn -EISCONN;\n")],
        ["e2e:test_supervisor_compare.py -k 'test_supervised_core and connect-nonblock'"]),
]
MUTANTS += [
    Mutant(
        "supervisor-connect-keeps-closed-listener",
        "a connect from the supervised tree reaches a listener the program closed (the supervisor's copy, until its sweep)",
        [("src/cli/supervise_client.c",
          "\tsvs_check_port(dst.port);\n",
          "")],
        ["e2e:test_supervisor_compare.py -k 'fork-while-connecting-v4'"]),
]

# The tier's memory (issue 23, "Memory"; src/fastpath/shm_mem.c): an idle
# connection gives its rings' pages back, under the reader/writer handshake.
MUTANTS += [
    Mutant(
        "shm-no-give-back",
        "a tier reader that finds its ring empty never punches it: a connection that streamed keeps 516 KiB resident",
        [("src/fastpath/shm_mem.c",
          "\t    !madvise(r->data, LF_RING_SIZE, MADV_REMOVE))",
          "\t    0)")],
        ["e2e:test_shm.py -k after_streaming_idle", "e2e:test_bench_stream.py -k idle_connections"]),
    Mutant(
        "shm-give-back-wrong-ring",
        "the reader punches the ring it writes (its peer's unread bytes) instead of the one it found empty",
        [("src/fastpath/shm_mem.c",
          "\t    !madvise(r->data, LF_RING_SIZE, MADV_REMOVE))",
          "\t    !madvise(c->tx.data, LF_RING_SIZE, MADV_REMOVE))")],
        ["e2e:test_shm.py -k 'after_streaming_idle or punches_only'"]),
]

# A socket registered in an epoll set before its connect stays on plain
# TCP under the supervisor (docs/supervisor.md, Options and epoll).
MUTANTS += [
    Mutant(
        "supervisor-epoll-not-looked-at",
        "the supervisor switches a socket the program registered in an epoll before connect (the look skipped)",
        [("src/cli/supervise_client.c",
          "\tif (copy >= 0 && sve_registered(n->pid, fd, copy)) {\n",
          "\tif (0 && copy >= 0 && sve_registered(n->pid, fd, copy)) {\n")],
        ["e2e:test_supervisor_connect.py -k epoll_before"]),
    Mutant(
        "supervisor-epoll-cache-kept",
        "an epoll created after the thread's first connect is not looked for (the cached epoll fds kept)",
        [("src/cli/supervise_epoll.c",
          "void sve_epoll_created(void)\n{\n\tgeneration++;\n",
          "void sve_epoll_created(void)\n{\n")],
        ["e2e:test_supervisor_connect.py -k 'epoll_before and late'"]),
]

# The shm tier after a fork: edge bytes turned on by another process's
# EPOLLET registration (the page's word, test_shm.py).
MUTANTS += [
    Mutant(
        "shm-token-by-own-edges-flag",
        "a reader takes its token by its own process's copy of the edges flag: after a fork, an edge byte read as a token resets the connection",
        [("src/fastpath/shm_io.c",
          "\tbool edges = atomic_load_explicit(&c->rx.h->edges, memory_order_relaxed) || urgent_ever(c);\n",
          "\tbool edges = atomic_load_explicit(&c->edges, memory_order_relaxed) || urgent_ever(c);\n")],
        ["e2e:test_shm.py -k forked_child"]),
]

# splice from a tier socket into a pipe: peeked, written, then taken
# (shm_splice.c's sock_to_pipe, test_shm.py).
MUTANTS += [
    Mutant(
        "shm-splice-takes-nothing-after-writing",
        "splice into a pipe leaves the peeked bytes on the socket: the reader gets them twice",
        [("src/fastpath/shm_splice.c",
          "\t\t\tif ((g = get(s, buf, (size_t)(w - k), MSG_DONTWAIT)) <= 0)\n",
          "\t\t\tif ((g = w - k) <= 0)\n")],
        ["e2e:test_shm.py -k 'sendfile or splice'"]),
]

# A peer that holds its give-back flag: a full ring for the writer
# (shm_io.c's wait_trim, test_shm.py).
MUTANTS += [
    Mutant(
        "shm-held-give-back-ignores-sndtimeo",
        "a blocking writer whose peer holds its give-back flag loops past SO_SNDTIMEO: a hang",
        [("src/fastpath/shm_io.c",
          "\t\t\tif (wait_trim(c, s0, restarts(total, i0), end) < 0) {\n",
          "\t\t\tif ((wait_trim(c, s0, restarts(total, i0), 0), 0)) {\n")],
        ["e2e:test_shm.py -k holds_its_give_back"], limit_s=30),
]

# The local end of a connection accepted on a wildcard listener, read from
# its saved SYN (syn.c's lf__syn_local; issue 19's set-up cuts).
MUTANTS += [
    Mutant(
        "syn-local-source-port",
        "the local end read from the saved SYN takes the TCP header's source port for its own: on a wildcard "
        "listener the kernel vouches for no hello and the client's connection is lost",
        [("src/protocol/syn.c",
          "\tep->port = (uint16_t)(syn[off + 2] << 8 | syn[off + 3]);\n",
          "\tep->port = (uint16_t)(syn[off] << 8 | syn[off + 1]);\n")],
        ["e2e:test_compare.py -k 'listener_kinds and names and any-v4'"]),
]

# lf_enable_fast_path's two-call check (api.c optin_classify; issue 19's set-up cuts).
MUTANTS += [
    Mutant(
        "optin-takes-mptcp-for-tcp",
        "lf_enable_fast_path trusts TCP_INFO alone: an MPTCP socket (which answers it) is opted in as TCP",
        [("src/fastpath/api.c",
          "lf__sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) == 0 && v == IPPROTO_TCP)\n",
          "lf__sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) == 0)\n")],
        ["c:test-api:errors"]),
]

# getsockopt/setsockopt under the supervisor (src/cli/supervise_sockopt.c,
# test_supervisor_compare.py's matrix rows, run whole here).
MUTANTS += [
    Mutant(
        "supervisor-sockopt-no-replay",
        "a get on a supervised fast-path socket is not preceded by the set the program made: TCP_NODELAY set to 1 reads 0",
        [("src/cli/supervise_sockopt.c",
          "\t\tif (kl != UNKNOWN && setsockopt(t, level, opt, s->b + at + HEAD, size_of(kl)) && (kl & KERNEL) &&\n",
          "\t\tif (0 && kl != UNKNOWN && setsockopt(t, level, opt, s->b + at + HEAD, size_of(kl)) && (kl & KERNEL) &&\n")],
        ["e2e:test_supervisor_compare.py -m '' -k 'sockopts-v4'"]),
    Mutant(
        "supervisor-sockopt-not-carried",
        "options set on a TCP socket before its connect or listen are not carried to the fast path: TCP_NODELAY reads 0 after connect",
        [("src/cli/supervise_sockopt.c",
          "\t\tif (len != UNKNOWN) {\n\t\t\tat = next;",
          "\t\tif (1) {\n\t\t\tat = next;")],
        ["e2e:test_supervisor_compare.py -m '' -k 'sockopts-before-v4'"]),
]

# The supervisor killed before its child may exec (test_supervisor.py).
MUTANTS += [
    Mutant(
        "supervisor-child-keeps-its-pair-end",
        "the child keeps the supervisor's end of their socket pair: killed before its word, the child waits for ever",
        [("src/cli/supervise.c",
          "\t\tclose(sv[0]); /* else",
          "\t\t(void)sv[0]; /* else")],
        ["e2e:test_supervisor.py -k killed_before"]),
]

# A close with bytes unread resets the peer, as over TCP (docs/shm.md,
# "A close with bytes unread"; test_shm.py).
MUTANTS += [
    Mutant(
        "shm-poll-swallows-the-reset",
        "poll's look at a tier socket takes the peer's reset and drops it: the next read gets EOF, not ECONNRESET",
        [("src/fastpath/shm.c",
          "\t\tlf__shm_io_end_seen(c, p->fd, r, true); /* the peer's reset: the application's to read */\n",
          "")],
        ["e2e:test_shm.py -k resets_the_peer"]),
    Mutant(
        "shm-write-ignores-peer-close",
        "a write whose bell is already set never looks at the socket: it succeeds into the ring of a peer that closed",
        [("src/fastpath/shm_io.c",
          "\tif (peer_closed(c, fd, flags) < 0) {\n",
          "\tif (0 && peer_closed(c, fd, flags) < 0) {\n")],
        ["e2e:test_shm.py -k resets_the_peer"]),
    Mutant(
        "shm-close-leaves-the-answer",
        "a client that closes before it took the server's answer leaves its byte unread: the server is reset, not given EOF",
        [("src/fastpath/shm.c",
          "\t\tlf__shm_decide(c, fd);\n\t\tif (atomic_load(&c->state) == ON) {\n",
          "\t\tif (atomic_load(&c->state) == ON) {\n")],
        ["e2e:test_shm.py -k resets_the_peer"]),
    Mutant(
        "shm-close-leaves-spent-tokens",
        "a last close leaves the tokens of bytes already read (stale or owed) on the socket: the kernel resets the peer where TCP gives EOF",
        [("src/fastpath/shm.c",
          "\t\t\tlf__shm_io_spent(c, fd); /* tokens left for bytes already read (shm_io.c) */\n",
          "\t\t\t; /* tokens left for bytes already read (shm_io.c) */\n")],
        ["e2e:test_shm.py -k 'close_after_every_byte or resets_the_peer'"]),
    Mutant(
        "shm-poll-counts-spent-tokens",
        "poll and select count a token of bytes already read (stale or owed) as something to read: POLLIN where a read waits",
        [("src/fastpath/shm.c",
          "\t\t\t\tlf__shm_io_spent(c, p->fd);\n",
          "\t\t\t\t;\n")],
        ["e2e:test_shm.py -k 'close_after_every_byte or polling or select'"]),
]

# The hand-off's `awake` stamp (shm_spin.c, docs/shm.md "Spinning"): the
# peer writes it, so the writer's wait is bounded by its own clock.
MUTANTS += [
    Mutant(
        "shm-handoff-waits-while-the-peer-says-awake",
        "a tier writer waits for its reader to take the bytes for as long as the reader's awake word is set, with no bound of its own: a reader that polled and went to sleep in epoll_wait, or a peer that writes the word and never reads, hangs the writer",
        [("src/fastpath/shm_spin.c",
          "\t\tif (i % 64 == 0 && ((now = lf__sys_now_ns()) >= end || stale(c, now)))\n\t\t\tbreak;\n",
          "\t\t(void)end;\n")],
        ["e2e:test_shm.py -k 'stopped_polling or claiming_to_poll'"], limit_s=30),
]

# The supervisor's costs (docs/supervisor.md, "Per trapped call"; sv-cost):
# the network namespace check is one SO_NETNS_COOKIE where the kernel has it.
MUTANTS += [
    Mutant(
        "supervisor-netns-cookie-ignored",
        "the supervisor's namespace check takes any socket's SO_NETNS_COOKIE for its own (the library's own check "
        "removed too): a socket of another network namespace is negotiated in the supervisor's",
        [("src/cli/supervise.c",
          "\t\treturn c == cookie;\n",
          "\t\treturn true;\n"),
         ("src/fastpath/connect.c",
          "\tif (!lf__diag_same_netns(fd))\n",
          "\tif (0)\n")],
        ["e2e:test_supervisor_security.py -k test_program_in_its_own_network_namespace_keeps_its_connection"]),
]

# A kept value the kernel held at the switch, which the library refuses
# to set again on a connected socket (IPV6_V6ONLY), answered as it is
# (src/cli/supervise_sockopt.c; issue 21).
MUTANTS += [
    Mutant(
        "supervisor-v6only-from-the-reference",
        "the supervisor answers a get of a kept option the library refuses to set again on a connected socket from "
        "the library's reference (as before issue 21): an accepted connection of a dual-stack listener reads "
        "IPV6_V6ONLY 1, a client that set it to 1 before its connect reads 0",
        [("src/cli/supervise_sockopt.c",
          "\t\t    row && row->how == LF_SO_TCP) {\n",
          "\t\t    row && row->how == LF_SO_TCP && 0) {\n")],
        ["e2e:test_supervisor.py -k dual_stack_listener_v6only"]),
]

# What an accepted fast-path socket takes from its listener's option records
# (sockopt.c, lf__sopt_accepted; docs/sockopts.md): what TCP's accepted socket
# inherits, no more, no less.
MUTANTS += [
    Mutant(
        "accepted-keeps-every-listener-option",
        "an accepted fast-path socket keeps every option record of its listener: it reads the listener's "
        "TCP_FASTOPEN, TCP_DEFER_ACCEPT and IP_OPTIONS, where TCP's accepted socket reads 0 and empty",
        [("src/fastpath/interpose.c",
          "\t\tlf__sopt_accepted(nfd);\n",
          "")],
        ["e2e:test_sockopt_edges.py -k test_listener_options_tcp_does_not_inherit"]),
    Mutant(
        "listener-save-syn-not-recorded",
        "a TCP_SAVE_SYN set on a listener is not recorded (its set pins, and a pinned set is never recorded): "
        "the connections accepted on the fast path read 0 where TCP's read the listener's 1",
        [("src/fastpath/sockopt.c",
          "\t\tif (!f->lst || !row || row->how != LF_SO_TCP)\n",
          "\t\tif (1)\n")],
        ["e2e:test_sockopt_edges.py -k test_listener_options_tcp_does_not_inherit"]),
]
MUTANTS += [
    Mutant(
        "supervisor-accepted-keeps-every-listener-option",
        "loopfast run's supervisor gives a connection accepted from a listener every set kept for the listener: a "
        "static program's accepted socket reads the listener's TCP_DEFER_ACCEPT and IP_OPTIONS",
        [("src/cli/supervise_sockopt.c",
          "\t\tif (lf__sopt_not_inherited(l, o)) {\n",
          "\t\tif (0) {\n")],
        ["e2e:test_sockopt_edges.py -k test_listener_options_tcp_does_not_inherit_supervised"]),
]
# A client between its hello and its SYN (stash.c, stalled): its hello is
# kept while its socket is bound (docs/security.md, Work per accept).
MUTANTS += [
    Mutant(
        "stash-stalled-client-not-asked",
        "a hello a second old whose sender holds it open but has no connection yet is dropped without asking "
        "the kernel whether its socket is still bound: a client held up between its hello and its SYN is reset",
        [("src/fastpath/stash.c",
          "\tif (r != 1)\n",
          "\tif (1)\n")],
        ["e2e:test_security.py -k test_client_stalled_between_its_hello_and_its_syn"]),
]
# The dumps of the bind table a stalled client asks for (stash.c, stalled;
# diag.c, lf__diag_bound): paced by what they cost, and a dual-stack
# client's socket looked for among AF_INET6 sockets (branch review).
MUTANTS += [
    Mutant(
        "stash-bound-dump-gap-ignores-cost",
        "the next dump of the bind table may start 20 ms after the last one started, however long it took "
        "(fe0557a): a uid holding many sockets bound makes the server's accepts spend their time in dumps, under "
        "the claim lock",
        [("src/fastpath/stash.c",
          "\tatomic_store(&next, end + (gap > STASH_BOUND_GAP_NS ? gap : STASH_BOUND_GAP_NS));\n",
          "\tatomic_store(&next, t + STASH_BOUND_GAP_NS);\n")],
        ["e2e:test_security.py -k 'test_bound_sockets_cannot_make_every_accept_walk_the_bind_table and loopfast' "
         "-m extra"], limit_s=60),
    Mutant(
        "diag-bound-v4-only",
        "a stalled client's bound socket is looked for among AF_INET sockets only: a dual-stack client "
        "(AF_INET6 on v4-mapped addresses) held up between its hello and its SYN is reset",
        [("src/fastpath/diag.c",
          "\treturn r == 0 && ep->family == AF_INET ? bound_in(AF_INET6, ep, uid) : r;\n",
          "\treturn r;\n")],
        ["e2e:test_security.py -k 'test_client_stalled_between_its_hello_and_its_syn and loopfast and mapped'"]),
]
MUTANTS += [
    Mutant(
        "shm-room-writer-skips-membarrier",
        "a tier writer about to sleep for room issues no membarrier: a reader that skips its fence (registered) "
        "can read want_space before its store of head is seen, and the writer sleeps with room in the ring",
        [("src/fastpath/shm_spin.c",
          "\tlf__sys_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);\n",
          "")],
        ["e2e:test_shm.py -k sleeps_for_room"]),
    Mutant(
        "shm-room-reader-light-unregistered",
        "a tier reader skips its fence without registering for membarrier's global expedited command: the "
        "writer's membarrier then orders nothing of the reader's",
        [("src/fastpath/shm_spin.c",
          "\t\tl = lf__sys_membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0 ? 1 : -1;\n",
          "\t\tl = 1;\n")],
        ["e2e:test_shm.py -k sleeps_for_room"]),
]
# The tier's ring follows SO_SNDBUF (issue 23, "Memory"; src/fastpath/shm_mem.c,
# src/protocol/ring.c lf__ring_grow): a writer never gets EAGAIN earlier than on
# the Unix stream, and a ring grows only where no unread byte moves.
MUTANTS += [
    Mutant(
        "shm-ring-ignores-sndbuf",
        "the tier's ring stays at 256 KiB whatever SO_SNDBUF says: a writer that raised it to 1 or 4 MiB gets "
        "EAGAIN after 262,144 bytes where the Unix stream takes 2 or 8 MB",
        [("src/fastpath/shm_mem.c",
          "\treturn w < LF_RING_SIZE ? LF_RING_SIZE : w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;\n",
          "\treturn LF_RING_SIZE;\n")],
        ["e2e:test_shm.py -k raised_sndbuf"]),
    Mutant(
        "shm-ring-grows-moving-bytes",
        "a ring grows whatever its unread bytes: those that wrapped are then read from the wrong place",
        [("src/protocol/ring.c",
          "\t\tif (used > r->size || (used && (((head ^ (r->pos - 1)) & block) || (head & (m - 1)) >= r->size)))\n",
          "\t\tif (used > r->size)\n")],
        ["c:test-ring"], limit_s=120),
    Mutant(
        "shm-reader-trusts-size",
        "the ring reader takes the peer's size word as it is: a size that is not a power of two within the "
        "area is used as the ring's",
        [("src/protocol/ring.c",
          "\treturn !(m & (m - 1)) && m >= LF_RING_SIZE && m <= area;\n",
          "\treturn m != 0;\n")],
        ["c:test-ring", "e2e:test_security.py -k 'garbage_in_the_rings and size'"], limit_s=300),
    Mutant(
        "shm-writer-takes-peer-size",
        "a tier writer takes any larger size the page says for its ring, as if a fork of its own had grown it: "
        "a peer makes it spread its bytes over the whole area",
        [("src/fastpath/shm_mem.c",
          "\tif (size_for(&c->tx, atomic_load_explicit(&c->want, memory_order_relaxed)) < m)\n\t\treturn false;\n",
          "")],
        ["e2e:test_security.py -k 'garbage_in_the_rings and grow'"], limit_s=300),
    Mutant(
        "shm-writer-ignores-fork-growth",
        "a tier writer keeps its own ring size when another process of its end (a fork) grew the ring: "
        "its bytes land where the reader does not look",
        [("src/fastpath/shm_mem.c",
          "\tc->tx.size = m;\n\treturn true;\n",
          "\treturn true;\n")],
        ["e2e:test_shm.py -k forked_child_keeps"]),
]
# loopfast run's supervisor answers Go's four keep-alive and nodelay sets on a
# fast-path socket from the values it saw accepted (supervise_sockopt.c, pure_set).
MUTANTS += [
    Mutant(
        "supervisor-accepted-set-ignores-value",
        "the supervisor answers a set of TCP_NODELAY/KEEPIDLE/KEEPINTVL/KEEPCNT 0 once any value of that "
        "option was accepted: TCP_KEEPIDLE 0 and 40000 say yes where TCP says EINVAL",
        [("src/cli/supervise_sockopt.c",
          "\t\tif (accepted[i].opt == opt && accepted[i].val == val)\n",
          "\t\tif (accepted[i].opt == opt)\n")],
        ["e2e:test_supervisor_connect.py -k test_keepalive_options_as_tcp"]),
]
# loopfast run's supervisor reads the program's fdinfo once before its ADDFD: the
# close-on-exec flag, and whether the fd still holds the socket (supervise_client.c, still_there).
MUTANTS += [
    Mutant(
        "supervisor-switch-drops-cloexec",
        "the fast-path socket a connect puts in the program is never close-on-exec: a socket made with "
        "SOCK_CLOEXEC loses the flag at its switch",
        [("src/cli/supervise_client.c",
          "\t*cloexec = fl >= 0 && (fl & O_CLOEXEC);\n",
          "\t*cloexec = false;\n")],
        ["e2e:test_supervisor_connect.py -k test_keepalive_options_as_tcp"]),
    Mutant(
        "supervisor-switch-ignores-fdinfo-inode",
        "the supervisor takes the program's fd number to hold the socket it connected whatever its fdinfo "
        "says: a number the program closed during the connect and reopened is replaced by the socket",
        [("src/cli/supervise_client.c",
          "\t\treturn (unsigned long long)ino == tino && info_field(buf, \"mnt_id:\", 10) == sockfs;\n",
          "\t\treturn true;\n")],
        ["e2e:test_supervisor_security.py -k test_socket_closed_during_its_connect_leaves_the_new_file_alone"]),
]
# The supervisor's pin check skips an option whose get once said ENOPROTOOPT
# (pinned.c, lf__sopt_pinned_on): only those.
MUTANTS += [
    Mutant(
        "pin-check-skips-options-seen-off",
        "the pin check also stops asking an option once a socket had it off: a later socket of the same "
        "program with SO_TIMESTAMP or TCP_FASTOPEN_CONNECT on is switched to the fast path",
        [("src/fastpath/pinned.c",
          "\t\t\t\t\treturn pins[i].level << 16 | opt;\n\t\t\t} else if (errno == ENOPROTOOPT) {\n",
          "\t\t\t\t\treturn pins[i].level << 16 | opt;\n\t\t\t\tno_get[i] |= bit;\n"
          "\t\t\t} else if (errno == ENOPROTOOPT) {\n")],
        ["e2e:test_supervisor_compare.py -m extra -k sockopt-pin"]),
]
# loopfast run's supervisor finishes at once a connect whose handshake has
# already ended (supervise_client.c, ended_now): only such a one.
MUTANTS += [
    Mutant(
        "supervisor-connect-handshake-taken-as-ended",
        "a connect whose handshake is still in progress (a full accept queue) is answered as if it had ended: "
        "a blocking connect returns at once, not when the handshake ends",
        [("src/cli/supervise_client.c",
          "\treturn lf__sys_ppoll(&pf, 1, &(struct timespec){ 0, 0 }, NULL) == 1 && (pf.revents & (POLLOUT | POLLERR | POLLHUP));\n",
          "\treturn lf__sys_ppoll(&pf, 1, &(struct timespec){ 0, 0 }, NULL) >= 0;\n")],
        ["e2e:test_supervisor_connect.py -k test_connect_to_full_queue"]),
]
# A ring found empty within 10 ms of its last give-back is due, and given
# back after the process waited (shm_mem.c, lf__shm_mem_sweep).
MUTANTS += [
    Mutant(
        "shm-give-back-sweep-skipped",
        "a due give-back is taken off the list in a wait but never made: a connection that streamed and then "
        "waits on the connection keeps its ring's pages",
        [("src/fastpath/shm_mem.c",
          "\t\tdue_out(c);\n\t\tif (c->rx.pos - c->trimmed >= KEEP)\n\t\t\tpunch(c, now);\n",
          "\t\tdue_out(c);\n")],
        ["e2e:test_shm.py -k due_give_back_is_made"]),
]
# The shm tier across exec (shm_exec.c, src/preload/exec.c; docs/shm.md, "exec:
# the rings are re-adopted"): the new image adopts the rings, the memfd is
# close-on-exec again there, an end keeps its side, and a program that cannot
# load loopfast gets the end (no memfd, no token as data, the peer's write fails).
MUTANTS += [
    Mutant(
        "shm-exec-not-adopted",
        "the exec'd program's preload never adopts the tier sockets it inherited: it holds the memfd "
        "without mapping it and reads the Unix stream with tokens on it",
        [("src/preload/preload.c",
          "\tlf__shm_exec_adopt(); /* tier sockets kept across the exec that started this program */\n",
          "")],
        ["e2e:test_shm.py -k exec_keeps_the_rings"]),
    Mutant(
        "shm-exec-adopted-memfd-inheritable",
        "the adopted memfd keeps the inheritable flag the exec needed: it would reach every program the "
        "exec'd one execs, with or without the socket",
        [("src/fastpath/shm_exec.c",
          "\tif (mine)\n\t\tlf__sys_fcntl(mfd, F_SETFD, FD_CLOEXEC);\n",
          "")],
        ["e2e:test_shm.py -k exec_keeps_the_rings"]),
    Mutant(
        "shm-exec-end-swapped",
        "the new image takes the other end's rings (server for client): it reads its own writes' ring",
        [("src/fastpath/shm_exec.c",
          "\t\t\tlf__ring_views(c->map, area, r->kind == 's', &c->rx, &c->tx);\n",
          "\t\t\tlf__ring_views(c->map, area, r->kind != 's', &c->rx, &c->tx);\n")],
        ["e2e:test_shm.py -k exec_keeps_the_rings"]),
    Mutant(
        "shm-exec-static-taken-for-dynamic",
        "an exec into a static program carries the rings as if it loaded loopfast: it gets the memfd and "
        "reads tokens as data",
        [("src/preload/exec.c",
          "\t\t\t\tyes = ph[i].p_type == PT_INTERP;\n",
          "\t\t\t\tyes = true;\n")],
        ["e2e:test_shm.py -k exec_into_a_static"]),
    Mutant(
        "shm-exec-static-queue-kept",
        "the socket shut down before an exec into a static program keeps its queue: the program reads the "
        "token as a byte of data before the end",
        [("src/fastpath/shm_exec.c",
          "\t\twhile (lf__sys_recvfrom(fd, b, sizeof(b), MSG_DONTWAIT, NULL, NULL) > 0)\n\t\t\t;\n",
          "\t\t(void)b;\n")],
        ["e2e:test_shm.py -k exec_into_a_static"]),
    Mutant(
        "shm-exec-static-fin-unmoved",
        "the shutdown before an exec into a static program leaves the page's fin: the peer's writes go on "
        "succeeding into the dead ring",
        [("src/fastpath/shm_exec.c",
          "\t\t\tatomic_fetch_or(&c->tx.h->fin, 1);\n\t\t\tatomic_fetch_add(&c->tx.h->fin, 2);\n",
          "")],
        ["e2e:test_shm.py -k exec_into_a_static"]),
    Mutant(
        "shm-exec-static-memfd-leaks",
        "an exec into a static program leaves the carried memfds inheritable: the program holds a memfd "
        "it cannot use",
        [("src/preload/exec.c",
          "\t\tlf__shm_exec_undo(undo_, nundo_, NULL);                                                \\\n",
          "\t\t(void)undo_;                                                                           \\\n")],
        ["e2e:test_shm.py -k exec_into_a_static"]),
]
# A client that execs before the server's answer: its new image switches with
# the count of bytes its previous image wrote on the stream (shm_exec.c).
MUTANTS += [
    Mutant(
        "shm-exec-undecided-count-lost",
        "a client exec'd before the server's answer forgets the bytes its previous image wrote on the "
        "stream: its switch tells the server 0, and those bytes are taken for tokens",
        [("src/fastpath/shm_exec.c",
          "\t\t\tc->stream_out = r->count;\n",
          "\t\t\tc->stream_out = 0;\n")],
        ["e2e:test_shm.py -k exec_before_the_answer"]),
]
# Dups of a tier socket carried across exec share one adopted connection (shm_exec.c).
MUTANTS += [
    Mutant(
        "shm-exec-dup-closes-memfd",
        "the second record of a socket (a dup carried along) takes the memfd its first record's "
        "connection already holds for a stray one, and closes it",
        [("src/fastpath/shm_exec.c",
          "\t\t\tmine = took = false; /* held by that connection already */\n",
          "\t\t\t;\n")],
        ["e2e:test_shm.py -k exec_keeps_the_rings"]),
]
# A set-user-ID program of another user cannot load loopfast: the exec shuts
# the tier sockets down rather than hand it the memfd (src/preload/exec.c).
MUTANTS += [
    Mutant(
        "shm-exec-setuid-taken-for-preloaded",
        "an exec into a set-user-ID program of another user carries the rings as if it loaded loopfast: "
        "a process of another uid gets the memfd and reads tokens as data",
        [("src/preload/exec.c",
          "\tif (!fstat(fd, &st) && (((st.st_mode & S_ISUID) && st.st_uid != geteuid()) ||\n",
          "\tif (!fstat(fd, &st) && ((false) ||\n")],
        ["e2e:test_shm.py -k 'exec_into_a_static and setuid'"]),
]
# loopfast run's supervisor finds the listener of an accept with one kcmp
# against the listener the last accept found (supervise_server.c,
# held_of), and puts the connect's switch on the inode of its one fstat
# (supervise_client.c): only the same listener, and that inode.
MUTANTS += [
    Mutant(
        "supervisor-accept-listener-not-compared",
        "an accept is taken as one on the listener the previous accept found, whatever its fd is (the kcmp's "
        "answer ignored): an accept on a second listener takes the first one's queued connection",
        [("src/cli/supervise_server.c",
          "\t    syscall(SYS_kcmp, n->pid, getpid(), KCMP_FILE, fd, held[last_held].copy) == 0)\n",
          "\t    syscall(SYS_kcmp, n->pid, getpid(), KCMP_FILE, fd, held[last_held].copy) >= -1)\n")],
        ["e2e:test_supervisor.py -k test_accepts_on_two_listeners_alternated"]),
    Mutant(
        "supervisor-connect-switch-inode-wrong",
        "the connect's switch compares the program's fd with another number than the TCP socket's inode: the "
        "socket is taken as closed during its connect and never switched",
        [("src/cli/supervise_client.c",
          "\tfinish(lfd, ep, n, copy, tcp, st.st_ino, fast, r ? -e : 0, dst.port);\n",
          "\tfinish(lfd, ep, n, copy, tcp, st.st_dev, fast, r ? -e : 0, dst.port);\n")],
        ["e2e:test_supervisor.py -k 'test_fast_path and c'"]),
]
# close_range (glibc's) closes the tier's descriptors in its range as
# close() does first (interpose.c, close_range_around).
MUTANTS += [
    Mutant(
        "shm-close-range-leaves-tier-entries",
        "close_range goes to the kernel alone: a number the program reuses for a file is still taken for a tier "
        "socket, and what it writes to the file goes to the ring (the peer reads it)",
        [("src/fastpath/interpose.c",
          "\treturn close_range_around(first, last, flags, !flags && !lf__sys_vfork_child());",
          "\treturn lf__sys_close_range(first, last, flags);")],
        ["e2e:test_shm.py -k close_range_then"]),
    Mutant(
        "close-range-closes-hidden",
        "close_range closes loopfast's hidden descriptors too: a worker that closes all but its socket loses a "
        "board's pair, and the numbers, reused, mix two connections",
        [("src/fastpath/interpose.c",
          "\t\tif (fl & LF_F_HIDDEN) {\n\t\t\tif (fd > lo)",
          "\t\tif (0) {\n\t\t\tif (fd > lo)")],
        ["e2e:test_shm.py -k 'survives_what and (closerange or cross)'"]),
    Mutant(
        "shm-stdio-dup-stays-on-the-tier",
        "a tier socket dup2'd onto stdout stays on the tier: bash's echo >&3 writes into the stream (a reset)",
        [("src/fastpath/interpose.c",
          "\tif (!stdio_ok(fd, nfd))\n\t\treturn -1;\n\tif (fd != nfd)\n"
          "\t\tlf__fd_relocate(nfd);\n\tr = REAL(dup2)(fd, nfd);",
          "\tif (fd != nfd)\n\t\tlf__fd_relocate(nfd);\n\tr = REAL(dup2)(fd, nfd);")],
        ["e2e:test_shm.py -k 'stdio_on and bash'"]),
    Mutant(
        "shm-stdio-fdopen-stays-on-the-tier",
        "fdopen of a tier socket keeps the tier: glibc's FILE reads and writes the stream under the rings",
        [("src/fastpath/interpose.c",
          "\tif (lf__shm_used && !lf__shm_leave_for_stdio(fd))\n\t\treturn NULL;",
          "")],
        ["e2e:test_shm.py -k 'stdio_on and fdopen'"]),
    Mutant(
        "shm-stdio-descriptor-0-asks",
        "a socket made at descriptor 0 asks for the tier and is offered it: fgets(stdin) reads the stream",
        [("src/fastpath/shm.c",
          "\tbool w = fd > LF_SHM_STDIO_MAX && (",
          "\tbool w = (")],
        ["e2e:test_shm.py -k 'stdio_on and stdin'"]),
    Mutant(
        "shm-stdio-descriptor-0-offered",
        "a server's socket accepted at descriptor 0 is offered the tier: its fgets(stdin) reads the stream",
        [("src/fastpath/shm.c",
          "\tif (fd > LF_SHM_STDIO_MAX && (lf__shm_global || (l && (atomic_load(&l->flags) & LF_F_TIER))))\n",
          "\tif ((lf__shm_global || (l && (atomic_load(&l->flags) & LF_F_TIER))))\n")],
        ["e2e:test_shm.py -k 'stdio_on and server'"]),
    Mutant(
        "shm-dprintf-through-glibc",
        "dprintf on a tier socket goes to glibc's own write: its bytes land in the stream under the rings",
        [("src/fastpath/io.c",
          "\tif (!lf__shm_used || !lf__shm_on(fd)) {\n\t\tif (!next)",
          "\tif (1) {\n\t\tif (!next)")],
        ["e2e:test_shm.py -k 'stdio_on and dprintf'"]),
    Mutant(
        "shm-stdio-child-does-not-wait-for-its-parent",
        "a fork's child that dup2s the socket onto its stdin does not wait for its parent to close its copy: "
        "refused (EOPNOTSUPP) where inetd's way works over TCP",
        [("src/fastpath/shm_leave.c",
          "\t\twhile (atomic_load(&c->state) == ON && !lf__shm_alone(c) && lf__sys_now_ns() < end)",
          "\t\twhile (0)")],
        ["e2e:test_shm.py -k 'stdio_on and fork'"]),
    Mutant(
        "shm-stdio-dup-waits-on-its-own-lock",
        "a signal handler's dup2 onto stderr takes the tier's locks its own thread holds: it waits for ever",
        [("src/fastpath/shm_leave.c",
          "\t\tif (!locks_free(c, end)) {",
          "\t\tif (0) {")],
        ["e2e:test_shm.py -k 'signal_handler_during_a_read'"]),
    Mutant(
        "shm-exit-keeps-its-holder",
        "a process that exits does not let go of the ends it holds: a shell's command leaves the shell never "
        "alone, and its stdio dup is refused",
        [("src/fastpath/shm.c",
          "\tif (!lf__shm_used || lf__sys_vfork_child())\n\t\treturn;\n\tfor (int fd = 0; fd <= hi; fd++) {",
          "\tif (1)\n\t\treturn;\n\tfor (int fd = 0; fd <= hi; fd++) {")],
        ["e2e:test_shm.py -k 'stdio_on and bash-cmd'"]),
    Mutant(
        "shm-exec-record-never-counted",
        "an exec record never says that the new image is a counted holder: its exit cannot let go",
        [("src/fastpath/shm_exec.c",
          "\t\tr.flags |= LF_SHM_REC_COUNTED;",
          "\t\t;")],
        ["e2e:test_shm.py -k 'stdio_on and bash-cmd'"]),
    Mutant(
        "shm-exec-stdio-stays-on-the-tier",
        "an exec carries a tier socket at descriptor 0 to 2 on the rings: the program's stdio writes past them",
        [("src/fastpath/shm_exec.c",
          "\t\t\tif (fd <= LF_SHM_STDIO_MAX && (atomic_load(&c->state) == OFF || lf__shm_leave(c, fd)))",
          "\t\t\tif (0)")],
        ["e2e:test_shm.py -k 'stdio_on and subprocess'"]),
]
# The shm tier's spinning round trip without the other core's lines
# (docs/shm.md, "Spinning", "Cache lines"): the hand-off's proof is the
# reader's `taken`, stored only by a read that takes every byte; the writer
# reads the reader's head only when the head it knew leaves too little room,
# and checks it after every write.
MUTANTS += [
    Mutant(
        "shm-handoff-takes-part",
        "a tier read that takes only part of its ring still tells the writer it takes every byte: the writer "
        "skips the token, and the bytes left wait in the ring with none on the socket (epoll, poll never wake)",
        [("src/fastpath/shm_io.c",
          "\t\t\tif (!peek && want == (size_t)a && all)\n\t\t\t\tlf__shm_spin_taking(c, c->rx.pos + want);",
          "\t\t\tif (!peek)\n\t\t\t\tlf__shm_spin_taking(c, c->rx.pos + (size_t)a);")],
        ["e2e:test_shm.py -k 'takes_part and partial'"]),
    Mutant(
        "shm-handoff-on-peek",
        "a tier read with MSG_PEEK tells the writer it takes every byte: the writer skips the token for bytes "
        "that stay in the ring",
        [("src/fastpath/shm_io.c",
          "\t\t\tif (!peek && want == (size_t)a && all)\n",
          "\t\t\tif (want == (size_t)a && all)\n")],
        ["e2e:test_shm.py -k 'takes_part and peek'"]),
    Mutant(
        "shm-room-trusts-a-stale-head",
        "a tier writer counts its room from the head it last read even when its own position has moved more "
        "than a ring past it (another process of its end wrote, after a fork): the count wraps, and the "
        "connection is reset",
        [("src/protocol/ring.c",
          "\tif (used < r->limit && r->limit - used >= want)\n",
          "\tif (r->limit - used >= want)\n")],
        ["e2e:test_shm.py -k child_wrote_rings"]),
    Mutant(
        "shm-write-skips-the-head-check",
        "a tier writer that has room from the head it knew never reads the peer's head again: garbage there "
        "(a head a terabyte ahead) goes unseen and the connection is not reset",
        [("src/fastpath/shm_io.c",
          "\t\tif (put && lf__ring_seen(&c->tx) < 0) /* the peer's head, checked once the bytes are out */\n"
          "\t\t\ts = LF_RING_BAD;\n",
          "")],
        ["e2e:test_security.py -k 'garbage_in_the_rings and room'"]),
]
# A due ring's give-back is looked at once in 64 empty-ring finds of its
# reader (shm_mem.c, DUE_LOOKS): still looked at.
MUTANTS += [
    Mutant(
        "shm-due-ring-never-looked-at",
        "a tier ring due for a give-back is given back only by the sweeps after a wait: a reader that only "
        "polls keeps its ring's pages",
        [("src/fastpath/shm_mem.c",
          "\tif (c->due_prev && ++c->due_looks % DUE_LOOKS)\n",
          "\tif (c->due_prev)\n")],
        ["e2e:test_shm.py -k only_polls"]),
]
# The tier's lingers (shm_spin.c, poll_yield; docs/shm.md "Lingering").
MUTANTS += [
    Mutant(
        "shm-read-never-lingers",
        "a tier read that empties its ring gives the token back at once: a streaming writer's next push rings "
        "and wakes the reader again, every time",
        [("src/fastpath/shm_io.c",
          "\tif (linger && lf__shm_spin_linger(c))\n",
          "\tif (0 && linger && lf__shm_spin_linger(c))\n")],
        ["e2e:test_shm.py -k 'keeps_both_ends_awake and not 65536'"]),
    # (No mutant for the write's linger for room: removing it left the
    # 64 KiB stream's writer sleeping 2.9-137 times per 1000 writes against
    # 2.6-5.2 with it, quiet, in 3 alternated runs, so one run in five of
    # test_a_stream_keeps_both_ends_awake passes without it: it survived a
    # quiet run, and was killed only under load.)
    Mutant(
        "shm-linger-keeps-token-of-empty-ring",
        "a tier read whose linger found nothing keeps the token anyway: the socket says POLLIN with the ring "
        "empty",
        [("src/fastpath/shm_spin.c",
          "\treturn poll_yield(c, &c->linger_rx, rx_avail, rx_copying, COPY_NS, true) > 0;",
          "\treturn poll_yield(c, &c->linger_rx, rx_avail, rx_copying, COPY_NS, true) >= 0;")],
        ["e2e:test_shm.py -k edge_per_write"]),
]
# SO_REUSEPORT groups stay plain TCP (listener.c; docs/reuseport.md: the
# member the SYN reaches need not be the one the hello went to).
MUTANTS += [
    Mutant(
        "listener-serves-reuseport",
        "an SO_REUSEPORT listener gets a rendezvous like any other: a client's hello goes to the member its "
        "look-up names, its SYN to the member the kernel picks, and the client waits for an answer",
        [("src/fastpath/listener.c",
          "\t    (lf__sys_getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &v, &vl) == 0 && v) ||\n",
          "")],
        ["e2e:test_reuseport.py -k loopfast"]),
]
# Small messages give their ring back at once; large reads are paced
# (shm_mem.c, SMALL).
MUTANTS += [
    Mutant(
        "shm-give-back-small-messages-paced",
        "a ring that carried small messages is paced like a stream of large reads: its give-back waits 10 ms "
        "and a wait, where a ping-pong's writer copies into lines the reader last read",
        [("src/fastpath/shm_mem.c",
          "\tif (now - c->trim_ns >= GIVE_BACK_NS || passed < (uint64_t)c->emptied * SMALL) {\n",
          "\tif (now - c->trim_ns >= GIVE_BACK_NS) {\n")],
        ["c:test-shm"]),
    Mutant(
        "shm-give-back-large-reads-at-once",
        "every ring is given back as soon as its reader finds it empty: a stream of large writes faults every "
        "page in again",
        [("src/fastpath/shm_mem.c",
          "\tif (now - c->trim_ns >= GIVE_BACK_NS || passed < (uint64_t)c->emptied * SMALL) {\n",
          "\tif (1) {\n")],
        ["c:test-shm"]),
]
MUTANTS += [
    Mutant(
        "shm-sendmmsg-passes-tier-socket",
        "sendmmsg skips sendmsg: a tier socket leaves in SCM_RIGHTS without its rings, and its receiver would "
        "read tokens as data while the peer writes to the ring",
        [("src/fastpath/io.c",
          "\tfor (unsigned i = 0; lf__shm_used && v && i < n && !rights; i++) /* (NULL: the kernel's EFAULT) */",
          "\tfor (unsigned i = 0; 0 && v && i < n && !rights; i++) /* (NULL: the kernel's EFAULT) */")],
        ["e2e:test_shm.py -k passing_a_tier"]),
]
MUTANTS += [
    Mutant(
        "shm-read-resets-when-its-looks-run-out",
        "a tier read whose three looks at the socket each found an explained byte (owed tokens come together) "
        "resets the connection, as for a byte no push explains",
        [("src/fastpath/shm_io.c",
          "\terrno = EAGAIN;\n\treturn -1;\n}\n\n/* Waits for POLLIN (read) or room",
          "\treturn lf__shm_broken(c, fd);\n}\n\n/* Waits for POLLIN (read) or room")],
        ["e2e:test_shm.py -k owed_tokens"]),
]
MUTANTS += [
    Mutant(
        "shm-sendmmsg-reads-a-null-vector",
        "sendmmsg's SCM_RIGHTS check reads the messages before the kernel has checked the vector: a NULL "
        "vector crashes the process where the kernel says EFAULT",
        [("src/fastpath/io.c",
          "lf__shm_used && v && i < n",
          "lf__shm_used && i < n")],
        ["e2e:test_shm.py -k passing_a_tier"]),
]
# Urgent data on the shm tier (shm_io.c, docs/shm.md "Urgent data"): the
# byte in the ring at its mark, its signal a MSG_OOB byte on the socket.
MUTANTS += [
    Mutant(
        "shm-urgent-read-past-the-mark",
        "a tier read does not stop at the urgent mark: the bytes before it and after it come in one read",
        [("src/fastpath/shm_io.c",
          "\t\treturn u - 1 - c->rx.pos < (uint64_t)a ? (long)(u - 1 - c->rx.pos) : a;\n",
          "\t\treturn a;\n")],
        ["e2e:test_shm.py -k urgent_read_stops_at_the_mark"]),
    Mutant(
        "shm-urgent-byte-in-the-stream",
        "without SO_OOBINLINE a tier read at the mark reads the urgent byte as data (TCP skips it)",
        [("src/fastpath/shm_io.c",
          "\tif (oobinline(fd)) {\n\t\tif (!peek && u != c->urg_done) {",
          "\tif (1) {\n\t\tif (!peek && u != c->urg_done) {")],
        ["e2e:test_shm.py -k urgent_byte_is_read_with_msg_oob"]),
    Mutant(
        "shm-urgent-read-twice",
        "recv(MSG_OOB) on the tier gives the urgent byte again after it was read (TCP: EINVAL)",
        [("src/fastpath/shm_io.c",
          "\tif (!u || u == c->urg_done || u - 1 - c->rx.pos >= (uint64_t)a) {",
          "\tif (!u || u - 1 - c->rx.pos >= (uint64_t)a) {")],
        ["e2e:test_shm.py -k urgent_byte_is_read_with_msg_oob"]),
    Mutant(
        "shm-urgent-signal-left",
        "the tier reader never takes the urgent signal off the socket: POLLPRI stays after the byte was read",
        [("src/fastpath/shm_io.c",
          "\tif (!atomic_compare_exchange_strong(&c->rx.h->urg_sig, &want, LF_URG_TAKING))\n\t\treturn;\n",
          "\treturn;\n")],
        ["e2e:test_shm.py -k urgent_pollpri"]),
    Mutant(
        "shm-urgent-no-signal",
        "the tier writer puts no MSG_OOB byte on the socket: no SIGURG, no POLLPRI",
        [("src/fastpath/shm_io.c",
          "\t\tif (lf__sys_sendto(fd, &u, 1, MSG_OOB | MSG_DONTWAIT | (flags & MSG_NOSIGNAL), NULL, 0) == 1)\n",
          "\t\tif (1)\n")],
        ["e2e:test_shm.py -k urgent_sigurg"]),
    Mutant(
        "shm-urgent-atmark-from-the-socket",
        "SIOCATMARK on a tier socket answers from the Unix socket (its tokens), not the ring's mark",
        [("src/fastpath/interpose.c",
          "\tif (req == SIOCATMARK && arg && lf__shm_atmark(fd, &q)) {",
          "\tif (0 && req == SIOCATMARK && arg && lf__shm_atmark(fd, &q)) {")],
        ["e2e:test_shm.py -k urgent_read_stops_at_the_mark"]),
    Mutant(
        "shm-urgent-empty-record-left",
        "the tier reader leaves the empty record the kernel keeps where a signal was taken off: epoll says "
        "readable with every byte read",
        [("src/fastpath/shm_io.c",
          "\tif (!urgent_ever(c) || !atomic_compare_exchange_strong(&c->rx.h->urg_sig, &zero, LF_URG_TAKING))\n",
          "\tif (1 || !atomic_compare_exchange_strong(&c->rx.h->urg_sig, &zero, LF_URG_TAKING))\n")],
        ["e2e:test_shm.py -k urgent_epoll"]),
    Mutant(
        "shm-urgent-fionread-counts-it-read",
        "FIONREAD on the tier counts an urgent byte already read with MSG_OOB (AF_UNIX's does not)",
        [("src/fastpath/shm.c",
          "\t*out = a > 0 ? (int)lf__shm_io_unread(c, a) : 0;\n",
          "\t*out = a > 0 ? (int)a : 0;\n")],
        ["e2e:test_shm.py -k urgent_fionread"]),
    # Not listed: the urgent send's spin restored (a blocking send that cannot
    # place its signal looks again without sleeping). Its test,
    # test_urgent_send_while_the_signal_is_held_sleeps, counts the sender's
    # CPU, which a yielding loop gets only where a CPU is free: on a busy
    # machine the mutant would survive, as shm-give-back-sweep-skipped once
    # did in CI.
    Mutant(
        "shm-urgent-oob-into-first-buffer",
        "recv(MSG_OOB) writes the urgent byte into the first buffer whatever its length (a crash on a NULL one)",
        [("src/fastpath/shm_io.c",
          "\t\twhile (!v->iov_len) /* k.len > 0: one has room */\n",
          "\t\twhile (false && !v->iov_len) /* k.len > 0: one has room */\n")],
        ["e2e:test_shm.py -k urgent_read_into_buffers"]),
    Mutant(
        "shm-urgent-recvmsg-flags-lost",
        "recvmsg on a tier socket answers from a copy of the msghdr: msg_flags (MSG_OOB) never reach the caller",
        [("src/fastpath/io.c",
          "\tif (m && lf__shm_on(fd) && lf__shm_recv(fd, m, flags, &r))\n\t\treturn r;\n",
          "\tif (m)\n\t\tSHM_READ(fd, m->msg_iov, m->msg_iovlen, flags);\n")],
        ["e2e:test_shm.py -k urgent_read_into_buffers"]),
    Mutant(
        "shm-urgent-signal-ahead-spins",
        "a blocking tier read whose ring is empty while the kernel's urgent byte is ahead of a token waits on the "
        "socket, which returns at once: it spins at a full CPU (a stopped writer, or a peer that sends the signal "
        "and a token itself), and a peer that then closes leaves it spinning for ever",
        [("src/fastpath/shm_io.c",
          "\t\tbool urg = a == 0 && signal_blocks(c, fd);\n",
          "\t\tbool urg = false;\n")],
        ["e2e:test_shm.py -k urgent_signal_ahead_of_an_empty_ring"]),
    Mutant(
        "shm-urgent-mark-unchecked",
        "a tier reader takes the peer's urgent mark without checking it lies within a ring: a mark a terabyte "
        "ahead lets the reader read a byte no push explains, where the connection must be reset",
        [("src/fastpath/shm_io.c",
          "\treturn u - 1 - c->rx.pos > lf__ring_size(&c->rx) ? LF_URG_TAKING : u;\n",
          "\treturn u;\n")],
        ["e2e:test_security.py -k 'garbage_in_the_rings and urg'"]),
    Mutant(
        "shm-urgent-token-taken-past-the-signal",
        "the tier reader takes a token that has the kernel's urgent byte ahead of it: the kernel drops the "
        "urgent byte (and POLLPRI) for it",
        [("src/fastpath/shm_io.c",
          "\t\tif (urgent && signal_ahead(fd))\n\t\t\tbreak;\n",
          "")],
        ["e2e:test_shm.py -k urgent_signal_ahead"]),
    Mutant(
        "shm-eagain-leaves-no-token",
        "a non-blocking tier write that finds no room (a full ring whose pushes a polling reader took at once, "
        "or a give-back in progress) answers EAGAIN with no token of its own on the socket: the reader empties "
        "the ring without taking a byte of the writer's, so the kernel never gives the writer's epoll EPOLLOUT, "
        "and an edge-triggered writer (nginx) waits for ever",
        [("src/fastpath/shm_io.c",
          "\t\tint rb = left ? 0 : ring_bell(c, fd, flags, 0, true);\n",
          "\t\tint rb = 0;\n")],
        ["e2e:test_shm.py -k '(meets_a_give_back or epoll_writer_gets) and shm'"]),
    Mutant(
        "shm-lt-epollout-on-full-ring",
        "epoll level-triggered reports EPOLLOUT for a tier socket whose ring is full: a writer that waits so for "
        "room is woken at once, over and over, while its reader reads nothing (a CPU spent)",
        [("src/fastpath/shm.c",
          "\t\tif (c && !(reg.events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE)) && (trim || space_now(c) == 0) &&",
          "\t\tif (false && c && !(reg.events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE)) && (trim || space_now(c) == 0) &&")],
        ["e2e:test_shm.py -k 'epollout and shm'"]),
    Mutant(
        "shm-lt-epollout-during-a-give-back",
        "epoll level-triggered reports EPOLLOUT for a tier socket whose write met the reader's give-back: the "
        "writer is woken at once, over and over, until the give-back ends (9,697 wake-ups in a give-back held 1 s)",
        [("src/fastpath/shm.c",
          "\t\tbool trim = c && atomic_load(&c->tx.h->trim);\n",
          "\t\tbool trim = false;\n")],
        ["e2e:test_shm.py -k 'meets_a_give_back and shm'"]),
    Mutant(
        "shm-lt-pwait2-give-back-park-not-looked-at-again",
        "epoll_pwait2 parks a registration for a give-back but never looks at it again: its writer waits for "
        "ever once the reader reads no more",
        [("src/fastpath/wait.c",
          "\t\tif (r == 0 && lf__shm_parked_trim)\n\t\t\tlf__shm_epoll_unpark();\n",
          "\t\tif (0 && r == 0 && lf__shm_parked_trim)\n\t\t\tlf__shm_epoll_unpark();\n")],
        ["e2e:test_shm.py -k 'meets_a_give_back and pwait2'"]),
    Mutant(
        "shm-lt-give-back-park-not-looked-at-again",
        "a registration parked for a give-back is not looked at again while the wait lasts: the writer's EPOLLOUT "
        "waits for the reader's next read, where TCP's comes at once",
        [("src/fastpath/wait.c",
          "\t\tif (r == 0 && lf__shm_parked_trim)\n\t\t\tlf__shm_epoll_unpark(); /* the give-back",
          "\t\tif (false && r == 0 && lf__shm_parked_trim)\n\t\t\tlf__shm_epoll_unpark(); /* the give-back")],
        ["e2e:test_shm.py -k 'meets_a_give_back and shm'"]),
    Mutant(
        "shm-lt-epollout-unrecorded",
        "a tier socket's epoll_ctl calls are not recorded once it is connected: a registration made or changed "
        "then is not known, and a level-triggered writer on a full ring is woken over and over again",
        [("src/fastpath/interpose.c",
          "LF_F_OPTIN | LF_F_RESET | LF_F_SHM)) ||\n",
          "LF_F_OPTIN | LF_F_RESET)) ||\n")],
        ["e2e:test_shm.py -k 'epollout and shm'"]),
    Mutant(
        "shm-lt-epollout-taken-from-the-end",
        "epoll takes EPOLLOUT out of a full ring's event that carries the peer's reset (EPOLLERR, EPOLLHUP): an "
        "application that writes only on EPOLLOUT is woken by EPOLLHUP alone, for ever, and never learns of the end",
        [("src/fastpath/shm.c",
          "fd >= 0 && !(ev[i].events & (EPOLLERR | EPOLLHUP)) ? lf__shm_use(fd) : NULL;",
          "fd >= 0 ? lf__shm_use(fd) : NULL;")],
        ["e2e:test_shm.py -k 'peers_reset and shm'"]),
    Mutant(
        "shm-lt-epollout-stays-edge-triggered",
        "a registration made edge-triggered while its tier socket's ring was full stays so after the wait: the "
        "application's level-triggered EPOLLIN becomes an edge",
        [("src/fastpath/shm.c",
          "record_mod(parked[i].epfd, parked[i].fd, false, &sgen) >= 0)\n",
          "false)\n")],
        ["e2e:test_shm.py -k 'level_triggered_epollout and shm'"]),
    Mutant(
        "shm-lt-park-ignores-epgen",
        "a wait that made a full ring's registration edge-triggered takes it as still so after another thread "
        "re-armed it (level-triggered): the kernel reports EPOLLOUT at once, over and over, and the wait spins",
        [("src/fastpath/shm.c",
          "\tif (i < lf__shm_parked && parked[i].gen == __atomic_load_n(&f->epgen, __ATOMIC_ACQUIRE) && parked[i].rest == rest)\n",
          "\tif (i < lf__shm_parked)\n")],
        ["e2e:test_shm.py -k 'rearms and shm'"]),
    Mutant(
        "shm-lt-restore-over-a-change",
        "the registration restored from the record at a wait's end is not made again after another thread's "
        "epoll_ctl that ran meanwhile: that change, made between the record's read and the MOD, is undone",
        [("src/fastpath/shm.c",
          "\t\tif (__atomic_load_n(&f->epgen, __ATOMIC_RELAXED) == g)\n\t\t\treturn bad ? -1 : (long)g;",
          "\t\tif (true)\n\t\t\treturn bad ? -1 : (long)g;")],
        ["e2e:test_shm.py -k 'end_as_made and shm'"]),
    Mutant(
        "shm-lt-unpark-over-the-application",
        "a wait restores a registration it parked even when the application changed it since: a one-shot "
        "registration the wait then spent is armed again, and its event comes a second time",
        [("src/fastpath/shm.c",
          "\t\tif (f && !set_changed(f, &parked[i]) && record_mod(",
          "\t\tif (f && record_mod(")],
        ["e2e:test_shm.py -k 'one_shot and shm'"]),
    Mutant(
        "shm-lt-epgen-odd-in-a-child",
        "a child forked while another thread's epoll_ctl of a tier socket ran keeps its count odd: every park "
        "there gives up, and a full ring's EPOLLOUT wakes the child over and over",
        [("src/fastpath/fork.c",
          "\tlf__shm_epoll_fork_child(); /* no epoll_ctl nor call of the parent's other threads runs here: puts what they held */\n",
          "")],
        ["e2e:test_shm.py -k 'child_forked_during_a_rearm and shm'"]),
    Mutant(
        "epoll-spin-kernel-only",
        "an epoll wait that spins looks at the kernel alone: a ring's bytes reach it only through their token, "
        "so every writer rings (one token per message)",
        [("src/fastpath/wait.c",
          "\t\ta->nw = lf__shm_used ? lf__shm_watch(a->epfd, a->w) : 0;\n",
          "\t\ta->nw = 0;\n")],
        ["e2e:test_shm.py -k 'wait_that_spins_sees_the_ring and epoll'"]),
    Mutant(
        "epoll-spin-reader-silent",
        "an epoll wait that spins on the rings does not say that its readers poll (awake): their writers ring",
        [("src/fastpath/shm.c",
          "\tlf__shm_spin_wake(c, now);\n\tif (lf__shm_avail(c) <= 0",
          "\t(void)now;\n\tif (lf__shm_avail(c) <= 0")],
        ["e2e:test_shm.py -k 'wait_that_spins_sees_the_ring and epoll'"]),
    Mutant(
        "epoll-spin-ring-freed-under-the-wait",
        "the last close of a tier socket unmaps its ring and frees its state while an epoll wait of another "
        "thread looks at them",
        [("src/fastpath/shm.c",
          "\tif (atomic_load(&watchers)) /* an epoll wait may be looking at its ring */\n",
          "\tif (0)\n")],
        ["e2e:test_shm.py -k 'wait_that_spins_on_a_ring_another_thread_closes and epoll'"]),
    Mutant(
        "epoll-spin-rings-alone-for-ever",
        "an epoll wait that spins gives the rings' events alone whenever they have bytes: a loop that leaves bytes "
        "in a ring never sees the set's other descriptors",
        [("src/fastpath/wait.c",
          "\tint k = now - kernel_looked < RINGS_ALONE_NS ? lf__shm_watch_ready(a->w, a->nw, a->ev, 0, a->max) : 0;\n",
          "\tint k = lf__shm_watch_ready(a->w, a->nw, a->ev, 0, a->max);\n")],
        ["e2e:test_shm.py -k 'epoll_wait_that_spins_gives_what_the_kernel_would and others'"]),
    Mutant(
        "epoll-spin-ring-event-twice",
        "an epoll wait that spins adds a ring's event after the kernel's event of the same socket (its token) "
        "rather than into it: the socket twice in one answer",
        [("src/fastpath/shm.c",
          "\t\tif (e < k) {\n\t\t\tev[e].events |= w[i].events;\n\t\t} else if (k < max) {\n",
          "\t\tif (k < max) {\n")],
        ["e2e:test_shm.py -k 'epoll_wait_that_spins_gives_what_the_kernel_would and others'"]),
    Mutant(
        "epoll-spin-ring-first-always",
        "an epoll wait that spins gives the rings' events from the first watched socket on, every time: with "
        "maxevents under the rings with bytes, the others are not given while the first keeps bytes",
        [("src/fastpath/shm.c",
          "\t\t\tturn = i + 1; /* to the back */\n",
          "")],
        ["e2e:test_shm.py -k 'epoll_wait_that_spins_gives_what_the_kernel_would and turns'"]),
    Mutant(
        "epoll-spin-watches-any-registration",
        "an epoll wait that spins answers from the ring for a registration that asks more than EPOLLIN (and "
        "EPOLLPRI): its EPOLLOUT and EPOLLRDHUP go",
        [("src/fastpath/shm.c",
          "\t\t    !(e.ev.events & ~(uint32_t)WATCHED_EVENTS))",
          "\t\t    !(e.ev.events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE)))")],
        ["e2e:test_shm.py -k 'epoll_wait_that_spins_gives_what_the_kernel_would and (out or rdhup)'"]),
    Mutant(
        "epoll-spin-ring-after-the-peers-close",
        "an epoll wait that spins answers from the ring after the peer began to close: a reset's EPOLLERR and "
        "EPOLLHUP go",
        [("src/fastpath/shm.c",
          "\tif (lf__shm_avail(c) <= 0 || atomic_load_explicit(&c->rx.h->fin, memory_order_relaxed) ||\n",
          "\tif (lf__shm_avail(c) <= 0 ||\n")],
        ["e2e:test_shm.py -k 'epoll_wait_that_spins_gives_what_the_kernel_would and reset'"]),
    Mutant(
        "poll-spin-kernel-only",
        "a poll that spins looks at the kernel alone: a ring's bytes reach it only through their token, so every "
        "writer rings (one token per message)",
        [("src/fastpath/wait.c",
          "\tif (a->nw < 0 && (a->nw = lf__shm_used ? lf__shm_watch_poll(a->fds, a->n, a->w) : 0))\n",
          "\tif (a->nw < 0 && (a->nw = 0))\n")],
        ["e2e:test_shm.py -k 'wait_that_spins_sees_the_ring and poll and not epoll'"]),
    Mutant(
        "poll-spin-reader-said-asleep-first",
        "a poll that will spin on a ring first says that its reader sleeps (awake 0): the answer written "
        "before its first look at the ring is rung for",
        [("src/fastpath/shm.c",
          "\t\t\tpoll_fix(&fds[i], &full, !spins || (fds[i].events & ~(POLLIN | POLLRDNORM)));\n",
          "\t\t\tpoll_fix(&fds[i], &full, true);\n")],
        ["e2e:test_shm.py -k 'wait_that_spins_sees_the_ring and poll and not epoll'"]),
    Mutant(
        "poll-spin-reader-said-asleep-after",
        "a poll that spun and returned says that its reader sleeps (awake 0): the reader's own write no longer "
        "renews the word, and the answer to it is rung for",
        [("src/fastpath/shm.c",
          "\t\t\t\tpoll_fix(&fds[i], &full, false);\n",
          "\t\t\t\tpoll_fix(&fds[i], &full, true);\n")],
        ["e2e:test_shm.py -k 'wait_that_spins_sees_the_ring and poll and not epoll'"]),
    Mutant(
        "poll-spin-rings-alone-for-ever",
        "a poll that spins gives the rings' POLLIN alone whenever they have bytes: a loop that leaves bytes in a "
        "ring never sees its other descriptors",
        [("src/fastpath/wait.c",
          "\tint k = now - kernel_looked < RINGS_ALONE_NS ? lf__shm_watch_ready_poll(a->w, a->nw, a->fds, 0) : 0;\n",
          "\tint k = lf__shm_watch_ready_poll(a->w, a->nw, a->fds, 0);\n")],
        ["e2e:test_shm.py -k 'poll_that_spins_gives_what_the_kernel_would and others'"]),
    Mutant(
        "poll-spin-watches-any-events",
        "a poll that spins answers from the ring for an entry that asks more than POLLIN: its POLLOUT, "
        "POLLRDHUP and POLLPRI go",
        [("src/fastpath/shm.c",
          "\t\tif (c && in && !(fds[i].events & ~(POLLIN | POLLRDNORM)) && atomic_load(&c->state) == ON &&\n",
          "\t\tif (c && in && atomic_load(&c->state) == ON &&\n")],
        ["e2e:test_shm.py -k 'poll_that_spins_gives_what_the_kernel_would and (out or rdhup or pri)'"]),
    Mutant(
        "spin-ring-answers-after-urgent-data",
        "a wait that spins answers from the ring for a socket polled for urgent data too after its writer sent "
        "some: the signal's POLLPRI (EPOLLPRI) goes",
        [("src/fastpath/shm.c",
          "\t    (w->pri && atomic_load_explicit(&c->rx.h->urg, memory_order_acquire)))\n",
          "\t    (w->pri && 0))\n")],
        ["e2e:test_shm.py -k 'gives_what_the_kernel_would and pri'"]),
    Mutant(
        "shm-close-frees-under-a-call",
        "a close of a tier socket's descriptor frees the connection's state while another thread's call "
        "(a blocked read) still uses it",
        [("src/fastpath/shm.c",
          "\tif (!atomic_load(&f->shm_busy)) {\n\t\tconn_put(c);\n",
          "\tif (1) {\n\t\tconn_put(c);\n")],
        ["e2e:test_shm.py -k 'another_thread_closes_goes_on and read'"]),
    Mutant(
        "shm-iovec-window-never-refilled",
        "a call's iovec past the tier's window of 64 pieces is never loaded: a blocking writev of 300 pieces "
        "sends 64, and MSG_WAITALL returns 64, where TCP sends and fills all 300",
        [("src/fastpath/shm_io.c",
          "\tif (k->len || !k->rest)\n\t\treturn false;\n",
          "\tif (k->len || !k->rest || 1)\n\t\treturn false;\n")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and vectored-v4'"]),
    Mutant(
        "shm-readv-stops-at-the-window",
        "a readv of 300 pieces without MSG_WAITALL stops at the window's 64 bytes with 300 in the ring: TCP "
        "fills every piece",
        [("src/fastpath/shm_io.c",
          "(!(flags & MSG_WAITALL) && !more && !next))",
          "(!(flags & MSG_WAITALL) && !more && (next || !next)))")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and vectored-v4'"]),
    Mutant(
        "shm-first-write-short",
        "a client's blocking first write, made before its server accepts, returns what fitted the stream "
        "(219,264 of 4 MiB) where TCP waits and sends it all",
        [("src/fastpath/shm_io.c",
          "\t\t\tif (!k.len || (r < 0 && errno != EAGAIN) || (r < 0 && must_not_wait(fd, flags))) {",
          "\t\t\tif (r > 0 || !k.len || (r < 0 && errno != EAGAIN) || (r < 0 && must_not_wait(fd, flags))) {")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and first-write-v4'"]),
    Mutant(
        "shm-short-write-drops-the-reset",
        "a blocking write that ends on the peer's reset after sending bytes returns the count but drops the "
        "reset it took off the socket: the next write gets EPIPE and SIGPIPE where TCP's says ECONNRESET",
        [("src/fastpath/shm_io.c", "\tif (errno == ECONNRESET)\n\t\tlf__err_keep(fd, ECONNRESET);\n\terrno = e0;\n", "\terrno = e0;\n")],
        ["e2e:test_shm.py -k 'ends_short'"]),
    Mutant(
        "shm-first-write-sigpipe-after-bytes",
        "a client's first write that sent bytes on the stream and then finds its server gone raises SIGPIPE "
        "(the client dies) where TCP's returns the count",
        [("src/fastpath/shm_io.c",
          "\t\t\t\tcur_skip(&k, (size_t)r);\n\t\t\t\tflags |= MSG_NOSIGNAL; /* a count now: no SIGPIPE, as TCP's */\n",
          "\t\t\t\tcur_skip(&k, (size_t)r);\n")],
        ["e2e:test_shm.py -k 'ends_short'"]),
    Mutant(
        "shm-first-write-timeout-per-wait",
        "a client's first write gives the ring's wait for room a whole SO_SNDTIMEO of its own after the wait for "
        "the server's answer: a 1 s timeout ran to 1.9 s",
        [("src/fastpath/shm_io.c", "\t\tif (!end)\n\t\t\tend = lf__sys_timeout_end(fd, SO_SNDTIMEO);\n\t\tif (wait_room(",
          "\t\tif (!end || total)\n\t\t\tend = lf__sys_timeout_end(fd, SO_SNDTIMEO);\n\t\tif (wait_room(")],
        ["e2e:test_shm.py -k 'ends_short'"]),
    Mutant(
        "shm-write-restarts-after-bytes",
        "a blocking write that has sent bytes goes on after a signal whose handler has SA_RESTART (all 4 MiB "
        "written) where TCP's returns what it sent",
        [("src/fastpath/shm_io.c", "\treturn sent ? atomic_load(&lf__sig_interrupt) - 1 : i0;", "\treturn i0;")],
        ["e2e:test_shm.py -k 'ends_short'"]),
    Mutant(
        "fastpath-msg-trunc-copies",
        "recv with MSG_TRUNC on a fast-path socket goes to the Unix stream, which copies the bytes: EFAULT "
        "for no buffer, where TCP discards them",
        [("src/fastpath/io.c", "r = (flags & MSG_TRUNC) && !lf__shm_on(fd) ? discard(",
          "r = 0 && !lf__shm_on(fd) ? discard(")],
        ["e2e:test_compare.py -k 'test_same_as_tcp and vectored-v4' -m 'not extra'"]),
    Mutant(
        "shm-msg-trunc-one-window",
        "a tier read with MSG_TRUNC|MSG_WAITALL discards 64 KiB at most (one scratch window) where TCP "
        "discards all that was asked",
        [("src/fastpath/shm_io.c", "\t\tk.rest = cur_left(&k);\n",
          "\t\tk.rest = cur_left(&k) < sizeof(scratch) ? cur_left(&k) : sizeof(scratch);\n")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and vectored-v4'"]),
    Mutant(
        "shm-waitall-timeout-per-wait",
        "a tier MSG_WAITALL read under SO_RCVTIMEO gives each wait a whole timeout (the kernel's peek's own), "
        "so bytes that keep coming hold the call past its timeout; TCP's timeout is the call's",
        [("src/fastpath/shm_io.c", "\tif (end || atomic_load(&lf__sig_seen) != s0)\n\t\treturn wait_fd(fd, POLLIN, end, s0, i0);\n",
          "\tif (atomic_load(&lf__sig_seen) != s0)\n\t\treturn wait_fd(fd, POLLIN, end, s0, i0);\n")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and sockopts-before-v4'"]),
    Mutant(
        "fastpath-sndtimeo-per-buffer",
        "a blocking fast-path write under SO_SNDTIMEO is the Unix socket's, whose timeout restarts for each "
        "buffer: a reader that frees room within each holds the write for ever, where TCP's ends at the timeout",
        [("src/fastpath/io.c", "== (LF_F_FAST | LF_F_SNDTIMEO) &&", "== (LF_F_FAST | LF_F_SNDTIMEO) && false &&")],
        ["e2e:test_compare.py -k 'test_same_as_tcp and backpressure-v4' -m 'not extra'"]),
    Mutant(
        "shm-zero-read-returns-at-once",
        "a tier read of 0 bytes returns 0 at once, where TCP's says EAGAIN on an empty socket and a blocking "
        "one waits for a byte",
        [("src/fastpath/shm_io.c", "\tif (!cur_left(&k)) {\n\t\t*ret = zero_read(c, fd, flags);\n",
          "\tif (!cur_left(&k)) {\n\t\t*ret = 0;\n")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and msgflags-v4'"]),
    Mutant(
        "shm-zero-read-as-a-peek",
        "a tier read of 0 bytes is a read of 1 peeked: its timeout says EAGAIN and a signal EINTR where TCP's "
        "one wait ends with 0, and with only an urgent byte queued it spins at a full CPU where TCP returns 0",
        [("src/fastpath/shm_io.c", "\tif (r >= 0 || r == AT_MARK || lf__shm_avail(c) != 0)\n\t\tgoto none;\n",
          "\tif (r >= 0 || r == AT_MARK)\n\t\tgoto none;\n"),
         ("src/fastpath/shm_io.c", "\t\tlf__sys_poll1(fd, POLLIN, end ? lf__sys_ms_until(end) : -1);\nnone:\n",
          "\t\treturn wait_read(fd, end, 0, 0) < 0 ? -1 : 0;\nnone:\n")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and msgflags-v4'"]),
    Mutant(
        "fastpath-zero-read-is-the-unix-sockets",
        "a fast-path recv of 0 bytes is the Unix socket's: EAGAIN at its timeout and EINTR at a signal, where "
        "TCP's one wait ends with 0",
        [("src/fastpath/io.c", "\tif (!lf__shm_on(fd) && !(flags & (MSG_OOB | MSG_ERRQUEUE)) && iov_empty(&copy)) {",
          "\tif (0 && !lf__shm_on(fd) && !(flags & (MSG_OOB | MSG_ERRQUEUE)) && iov_empty(&copy)) {")],
        ["e2e:test_compare.py -k 'test_same_as_tcp and msgflags-v4' -m 'not extra'"]),
    Mutant(
        "shm-read-of-nothing-waits",
        "read() and readv() of nothing on a tier socket wait for a byte (a recv's), where the VFS answers 0 "
        "at once",
        [("src/fastpath/io.c", "\tif (!n) /* the VFS answers 0 before the socket sees it (recv of 0 waits for a byte) */\n"
          "\t\treturn REAL(read)(fd, buf, n);\n", "")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and msgflags-v4'"]),
    Mutant(
        "shm-peek-spins-behind-an-urgent-byte",
        "a blocking tier peek that finds only an urgent byte queued, which it cannot take, looks again at once: "
        "it spins at a full CPU past its timeout, where TCP's waits for more and says EAGAIN at the timeout",
        [("src/fastpath/shm_io.c", "\t\tif ((a != 0 && (a < 0 || !(flags & MSG_PEEK))) || moved(c, f))\n",
          "\t\tif (a != 0 || moved(c, f))\n")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and msgflags-v4'"]),
    Mutant(
        "shm-read-trusts-the-timeout-flag",
        "a tier read whose kernel wait says EAGAIN (a timeout set through a dup, unknown to the descriptor's "
        "flags) waits again with no timeout: it hangs where TCP says EAGAIN",
        [("src/fastpath/shm_io.c", "\treturn lf__sys_recvfrom(fd, &b, 1, MSG_PEEK, NULL, NULL) >= 0 ? 0 : -1;\n}",
          "\tif (lf__sys_recvfrom(fd, &b, 1, MSG_PEEK, NULL, NULL) >= 0)\n\t\treturn 0;\n"
          "\treturn errno == EAGAIN ? wait_fd(fd, POLLIN, 0, s0, i0) : -1;\n}")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and sockopts-before-v4'"]),
    Mutant(
        "timeout-ms-wraps",
        "a wait's milliseconds are an int of the deadline's distance, and a poll that ends before the deadline "
        "is its end: a timeout of 2^32 ms wraps to 672 ms, and a tier read says EAGAIN where TCP's waits",
        [("src/fastpath/sys.h", "\treturn end - now >= (uint64_t)INT32_MAX * 1000000u ? INT32_MAX : (int)((end - now + 999999) / 1000000);",
          "\treturn (int)((end - now + 999999) / 1000000);"),
         ("src/fastpath/shm_io.c", "\t\tif (lf__sys_now_ns() < end)\n\t\t\treturn 0; /* a wait of INT_MAX ms", "\t\tif (0)\n\t\t\treturn 0; /* a wait of INT_MAX ms")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and sockopts-before-v4'"]),
    Mutant(
        "fastpath-timed-write-trusts-the-flags",
        "a fast-path write under SO_SNDTIMEO trusts the descriptor's flags: O_NONBLOCK set through a dup waits "
        "out the timeout (60 s) where TCP says EAGAIN at once",
        [("src/fastpath/io.c", "if (r < 0 && errno == EAGAIN && nb && !end && !lf__sys_file_nonblocking(fd)) {",
          "if (r < 0 && errno == EAGAIN && nb && !end) {")],
        ["e2e:test_compare.py -k 'test_same_as_tcp and backpressure-v4' -m 'not extra'"]),
    Mutant(
        "shm-write-trusts-the-nonblock-flag",
        "a tier write to a full ring trusts the descriptor's O_NONBLOCK flag: a file made non-blocking through "
        "a dup waits out the timeout where TCP says EAGAIN at once",
        [("src/fastpath/shm_io.c", "\treturn nonblocking(fd, flags) || lf__sys_file_nonblocking(fd);",
          "\treturn nonblocking(fd, flags);")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and backpressure-v4'"]),
    Mutant(
        "shm-short-write-keeps-a-stale-reset",
        "a non-blocking write that fits part keeps the caller's stale errno (another connection's ECONNRESET) "
        "as this socket's reset: the next write of a healthy connection says ECONNRESET",
        [("src/fastpath/shm_io.c", "\terrno = err; /* the error the loop ended on", "\t/* the error the loop ended on")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and vectored-v4'"]),
    Mutant(
        "fastpath-discard-drops-msg-flags",
        "a fast-path recvmsg with MSG_OOB|MSG_TRUNC loses MSG_OOB in msg_flags (TCP says it)",
        [("src/fastpath/io.c", "\t\tm->msg_flags |= one.msg_flags;\n", "")],
        ["e2e:test_compare.py -k 'test_same_as_tcp and vectored-v4' -m 'not extra'"]),
    Mutant(
        "fastpath-discard-skips-the-kernels-checks",
        "a fast-path recvmsg with MSG_TRUNC and 1,025 pieces reads where TCP says EMSGSIZE",
        [("src/fastpath/io.c", "\tif (m->msg_iovlen > UIO_MAXIOV) {\n\t\terrno = EMSGSIZE;",
          "\tif (0) {\n\t\terrno = EMSGSIZE;")],
        ["e2e:test_compare.py -k 'test_same_as_tcp and vectored-v4' -m 'not extra'"]),
    Mutant(
        "fastpath-discard-peeks-one-piece",
        "a fast-path peek with MSG_TRUNC|MSG_WAITALL sees 64 KiB where TCP's sees all it asked",
        [("src/fastpath/io.c", "lf__scratch_iov(v, DISCARD_PIECES, n - total, &k)", "lf__scratch_iov(v, 1, n - total, &k)")],
        ["e2e:test_compare.py -k 'test_same_as_tcp and vectored-v4' -m 'not extra'"]),
    Mutant(
        "shm-msg-trunc-peeks-one-piece",
        "a tier peek with MSG_TRUNC|MSG_WAITALL sees 64 KiB where TCP's sees all it asked",
        [("src/fastpath/shm_io.c", "lf__scratch_iov(k->v, IOV_MAX_SHM, k->rest, &k->n)", "lf__scratch_iov(k->v, 1, k->rest, &k->n)")],
        ["e2e:test_compare.py -k 'test_same_as_tcp_shm and vectored-v4'"]),
    Mutant(
        "shm-close-keeps-no-socket",
        "a close under another thread's call parks the connection but not the socket: the kernel frees it at "
        "once, and the peer's write, whose bytes a spinning read still takes, gets EPIPE",
        [("src/fastpath/shm.c",
          "\tkeep_socket(c, fd);\n\tpark_on(f, c);\n",
          "\tpark_on(f, c);\n")],
        ["e2e:test_shm.py -k 'spinning_read_leaves'"]),
    Mutant(
        "shm-kept-socket-closed-with-spent-tokens",
        "the last put closes the kept socket with the tokens of bytes the call read still on it: the peer, "
        "which wrote them, is reset where TCP gives it EOF",
        [("src/fastpath/shm.c",
          "&& lf__shm_ours(c->kept, c->kept_ino))\n\t\tlf__shm_io_spent(c, c->kept);\n",
          "&& lf__shm_ours(c->kept, c->kept_ino) && 0)\n\t\tlf__shm_io_spent(c, c->kept);\n")],
        ["e2e:test_shm.py -k 'reads_eof_after'"]),
    Mutant(
        "shm-parked-never-put",
        "a connection closed under another thread's call is never put when the call ends: its ring stays "
        "mapped and its peer never sees the end",
        [("src/fastpath/shm.c",
          "\tif (atomic_fetch_sub(&f->shm_busy, 1) == 1 && __atomic_load_n(&f->shm_parked, __ATOMIC_SEQ_CST))\n",
          "\tif (atomic_fetch_sub(&f->shm_busy, 1) == 1 && 0)\n")],
        ["e2e:test_shm.py -k 'another_thread_closes_goes_on and read'"]),
    Mutant(
        "shm-read-touches-a-moved-descriptor",
        "a blocked read whose descriptor another thread closed goes on through the number: woken by its peer's "
        "bytes, it takes the first byte of the socket that now has that number for a token and shuts it down",
        [("src/fastpath/shm_io.c",
          "\t\tif (moved(c, f)) {\n\t\t\tr = read_ring_only(c, &k, flags);\n",
          "\t\tif (0) {\n\t\t\tr = read_ring_only(c, &k, flags);\n"),
         ("src/fastpath/shm_io.c",
          "\t\tif (moved(c, f))\n\t\t\tcontinue;\n",
          "")],
        ["e2e:test_shm.py -k 'never_touches_the_next_socket and read'"]),
    Mutant(
        "shm-write-rings-on-a-moved-descriptor",
        "a blocked write whose descriptor another thread closed goes on through the number: woken by room, it "
        "rings its bell on the socket that now has that number (its peer reads a token it was never sent)",
        [("src/fastpath/shm_io.c",
          "\t\tif (moved(c, f)) { /* closed under the write's wait: no bell on what the number names now */\n",
          "\t\tif (0) {\n")],
        ["e2e:test_shm.py -k 'never_touches_the_next_socket and write'"]),
    Mutant(
        "shm-fork-child-puts-under-the-due-lock",
        "a forked child puts the connections its parent's calls held while the fork still holds the due "
        "give-backs' lock, which the put of a due ring takes: the child hangs in its fork",
        [("src/fastpath/fork.c",
          "\tlf__shm_mem_fork_after();\n\tlf__shm_epoll_fork_child();",
          "\tlf__shm_epoll_fork_child();\n\tlf__shm_mem_fork_after();")],
        ["e2e:test_shm.py -k fork_while_a_call_holds"], limit_s=120),
    Mutant(
        "epoll-spin-set-by-number",
        "an epoll wait that spins takes a socket's record of a set by its number alone: a closed set's "
        "registration is reported on the new set that took its number",
        [("src/fastpath/shm.c",
          "\t\tif (e.epfd1 == epfd + 1 && e.set == s && ",
          "\t\tif (e.epfd1 == epfd + 1 && ")],
        ["e2e:test_shm.py -k 'epoll_wait_that_spins_gives_what_the_kernel_would and stale'"]),
    Mutant(
        "shm-lt-restore-counted-as-the-applications",
        "a wait's restore counts as the application's change (epgen): another set's wait that parked the same "
        "socket then takes its registration for changed by the application and leaves it edge-triggered",
        [("src/fastpath/shm.c",
          "\t\t\t__atomic_add_fetch(&f->eprest, 1, __ATOMIC_RELEASE);\n",
          "\t\t\t__atomic_add_fetch(&f->epgen, 2, __ATOMIC_RELEASE);\n")],
        ["e2e:test_shm.py -k 'two_sets and shm'"]),
    Mutant(
        "epoll-wait-timeout-drops-part-ms",
        "an epoll wait that goes back to the kernel after its events were all taken out counts only whole "
        "milliseconds of each turn: turns shorter than one never use up its time, and it lasts seconds",
        [("src/fastpath/wait.c",
          "\t\t\tstart += (uint64_t)spent * 1000000; /* the part of a millisecond counts too */\n",
          "\t\t\tstart = lf__sys_now_ns();\n")],
        ["e2e:test_shm.py -k 'all_taken_out and shm'"]),
    Mutant(
        "shm-epoll-answer-readable",
        "epoll's answers are left as the kernel gives them while a client waits for the server's answer: the "
        "answer's byte makes the client's socket readable, and the read that follows says EAGAIN (wrk counts "
        "an error and reconnects)",
        [("src/fastpath/shm.c",
          "\tif (!atomic_load_explicit(&lf__shm_undecided, memory_order_relaxed))\n\t\treturn atomic_load",
          "\tif (true)\n\t\treturn atomic_load")],
        ["e2e:test_shm.py -k 'readable_only_with_bytes and shm'"]),
]
# A tier socket passed with SCM_RIGHTS (shm_pass.c, src/protocol/pass.c;
# docs/shm.md, "Passing the socket"): the rings go along to a receiver that
# runs loopfast, the application gets only its own descriptors, and a
# forged record names only its own message.
MUTANTS += [
    Mutant(
        "shm-pass-extras-to-app",
        "the receiver leaves the memfds that came with the socket in the application's control buffer",
        [("src/fastpath/shm_pass.c",
          "\tmemcpy(fds, pos, app * sizeof(int));\n\treturn app;\n",
          "\tmemmove(fds, fds + 1, (n - 1) * sizeof(int));\n\treturn n - 1;\n")],
        ["e2e:test_shm.py -k passing_a_tier_socket_to_a_loopfast"]),
    Mutant(
        "shm-pass-any-peer",
        "the sender takes any peer for one that runs loopfast: a receiver without it gets stray memfds and a "
        "socket whose reads give tokens as data",
        [("src/fastpath/shm_pass.c",
          "\tif (cr.pid == getpid())\n\t\treturn true;\n",
          "\tif (cr.pid)\n\t\treturn true;\n")],
        ["e2e:test_shm.py -k without_loopfast"]),
    Mutant(
        "shm-pass-named-socket-left",
        "the receiver leaves a socket its record names but that was not adopted (another socket's inode) as it "
        "came: its program reads the tokens on it as data",
        [("src/fastpath/shm_pass.c",
          "\t\tif (!lf__shm_conn_of(r.fd)) /* named a tier socket, and not one: never a token read as data */\n\t\t\tlf__sys_shutdown(r.fd, SHUT_RDWR);\n",
          "")],
        ["e2e:test_security.py -k forged_records"]),
    Mutant(
        "shm-pass-ring-of-any-socket",
        "the receiver adopts a passed socket with whatever ring its record pairs it with, without asking whether "
        "the socket's peer maps that ring: a forger reads there what the receiver writes to a third party",
        [("src/fastpath/shm_pass.c",
          "if (p->mfd >= 0 && (r.mfd < 0 || !peer_maps_ring(r.fd, r.mino))) {",
          "if (p->mfd >= 0 && r.mfd < 0) {")],
        ["e2e:test_shm.py -k forged_record_cannot"]),
    Mutant(
        "shm-pass-unsealed-record-taken",
        "the receiver takes a record memfd that is not sealed against writes (one its sender could still change)",
        [("src/fastpath/shm_pass.c",
          "\tif (seals < 0 || (seals & SEALS) != SEALS)\n",
          "\tif (seals < 0)\n")],
        ["e2e:test_security.py -k forged_records"]),
    Mutant(
        "shm-pass-parser-trusts-positions",
        "the record parser takes a memfd position past the descriptors received: the receiver adopts with "
        "whatever number lies there",
        [("src/protocol/pass.c",
          " || (size_t)r->mfd >= nfds - 1 ||",
          " ||")],
        ["e2e:test_security.py -k forged_records"]),
    Mutant(
        "shm-pass-room-ignored",
        "the receiver gives every descriptor however small the application's control buffer: one is "
        "installed without the application knowing",
        [("src/fastpath/shm_pass.c",
          "\t\tfit = fit < n ? fit : n;\n",
          "\t\tfit = n;\n")],
        ["e2e:test_shm.py -k passing_a_tier_socket_to_a_loopfast"]),
    Mutant(
        "shm-leave-answer-copies-nothing",
        "a writer asked to leave puts its mark on the stream but not the bytes its reader had not read: the "
        "program the socket is passed to never gets them",
        [("src/fastpath/shm_leave.c",
          "bool ok = !answer || tx_leave(c, fd, LF_BYTE_COPY, true);",
          "bool ok = !answer || tx_leave(c, fd, LF_BYTE_COPY, false);")],
        ["e2e:test_shm.py -k leaves_the_tier"]),
    Mutant(
        "shm-leave-writer-stays-on-the-ring",
        "a writer that answered goes on writing into the ring, which nobody reads any more",
        [("src/fastpath/shm_io.c",
          "\t\tif (atomic_load_explicit(&c->tx_left, memory_order_relaxed)) { /* left the ring",
          "\t\tif (0) { /* left the ring")],
        ["e2e:test_shm.py -k leaves_the_tier"]),
    Mutant(
        "shm-leave-mark-taken-for-garbage",
        "a reader that meets its writer's leave byte takes it for a byte no push explains, and resets",
        [("src/fastpath/shm_io.c",
          "\t\tif (stray && b == LF_BYTE_LEFT) {",
          "\t\tif (0) {")],
        ["e2e:test_shm.py -k leaves_the_tier"]),
    Mutant(
        "shm-leave-request-never-withdrawn",
        "a sender whose peer did not answer in time fails the pass but leaves the request standing: the peer "
        "answers later, copying onto the stream bytes the sender still reads from the ring",
        [("src/fastpath/shm_leave.c",
          "\t\t\tif (atomic_compare_exchange_strong(&c->rx.h->leave, &want, LF_LEAVE_NONE))\n\t\t\t\treturn 0;",
          "\t\t\tif (want == LF_LEAVE_ASK)\n\t\t\t\treturn 0;")],
        ["e2e:test_shm.py -k never_answers"]),
    Mutant(
        "shm-leave-not-before-exec",
        "an exec into a program that cannot load loopfast shuts every tier socket down, even one whose peer "
        "would have moved it onto the stream: the program reads the end where TCP's reads the bytes",
        [("src/fastpath/shm_exec.c",
          "\t\tif (c && (atomic_load(&c->state) == OFF || lf__shm_leave(c, fd)))\n",
          "\t\tif (c && atomic_load(&c->state) == OFF)\n")],
        ["e2e:test_shm.py -k exec_into_a_static_program_whose"]),
    Mutant(
        "shm-leave-close-leaves-its-bytes",
        "a last close leaves the leave's bytes (the request, the peer's LF_BYTE_LEFT) unread: the kernel resets the "
        "connection of whoever holds the peer's end now, where TCP gives it EOF",
        [("src/fastpath/shm.c",
          "\t\t\tlf__shm_leave_met(c, fd); /* and a leave's bytes (shm_leave.c) */\n",
          "\t\t\t; /* and a leave's bytes (shm_leave.c) */\n")],
        ["e2e:test_shm.py -k 'closes_or_passes or leaves_no_byte'"]),
    Mutant(
        "shm-leave-answered-end-asks",
        "an end that answered its peer's leave and is passed on asks the peer, which answers nothing any more: "
        "the request's byte reaches the program that holds the peer's end now, as data, and the pass is refused",
        [("src/fastpath/shm_leave.c",
          "\tif (atomic_load(&c->tx_left)) { /* this end answered: its peer leaves, and answers no request */",
          "\tif (0) {")],
        ["e2e:test_shm.py -k closes_or_passes"]),
    Mutant(
        "shm-leave-read-after-the-leave",
        "a read that waited for the ring's lock while another thread left the tier reads the ring's bytes, "
        "which the peer copied onto the stream for the receiver: doubled",
        [("src/fastpath/shm_io.c",
          "\t\tif (atomic_load(&c->state) == OFF) { /* another thread's leave while this one waited",
          "\t\tif (0) { /* another thread's leave while this one waited")],
        ["e2e:test_shm.py -k doubles_nothing"]),
    Mutant(
        "shm-leave-dispatcher-refused",
        "a server that has not read since its client's switch counts as one still reading the client's stream "
        "bytes: a dispatcher's pass is refused",
        [("src/fastpath/shm_leave.c",
          "\t\tc->stream_done = true;\n\treturn !c->server || c->stream_done;",
          "\t\t;\n\treturn !c->server || c->stream_done;")],
        ["e2e:test_shm.py -k 'dispatcher or closes_or_passes'"]),
    Mutant(
        "shm-alone-ignores-other-holders",
        "an end counts as alone whatever the page's count of other holders says: a forked child leaves the tier "
        "while its parent still holds the end",
        [("src/fastpath/shm.c",
          "\t       (atomic_load(&c->state) != ON || !atomic_load(&c->tx.h->others));",
          "\t       (atomic_load(&c->state) != ON || 1);")],
        ["e2e:test_shm.py -k 'forked_child or only_when_one_process'"]),
    Mutant(
        "shm-fork-counts-no-holder",
        "a fork's prepare does not count the child among the end's holders",
        [("src/fastpath/shm.c",
          "\t\t\tlf__shm_holder(c, true); /* once a connection: its dups find it counted */",
          "\t\t\t; /* once a connection: its dups find it counted */")],
        ["e2e:test_shm.py -k 'forked_child'"]),
    Mutant(
        "shm-close-keeps-its-holder",
        "a process's last close of a connection leaves the end's count of holders as it was: a forked child whose "
        "parent closed its copy is never alone",
        [("src/fastpath/shm.c",
          "\t\tlf__shm_holder(c, false);\n}",
          "\t\t;\n}")],
        ["e2e:test_shm.py -k 'forked_child or only_when_one_process'"]),
    Mutant(
        "shm-pass-counts-no-holder",
        "a pass does not count the receiver among the end's holders: it leaves the tier while the sender holds it",
        [("src/fastpath/shm_pass.c",
          "\t\tholders(conns, h.n, true);\n",
          "\t\t;\n")],
        ["e2e:test_shm.py -k 'only_when_one_process'"]),
    Mutant(
        "shm-pass-receiver-never-alone",
        "the receiver of a passed tier socket counts it as shared for ever, as before (its leave refused)",
        [("src/fastpath/shm_pass.c",
          "\t\t\t\t\t.flags = p->flags, .owed = p->owed };",
          "\t\t\t\t\t.flags = p->flags | LF_SHM_REC_FORKED, .owed = p->owed };")],
        ["e2e:test_shm.py -k 'only_when_one_process'"]),
    Mutant(
        "vfork-child-changes-the-parents-table",
        "a vfork child's close, close_range and dup2 go through loopfast's table, which is its parent's memory",
        [("src/fastpath/fdtab.c",
          "\treturn lf__fd_used(fd) && lf__sys_vfork_child();",
          "\treturn false;"),
         ("src/fastpath/interpose.c",
          "\treturn close_range_around(first, last, flags, !flags && !lf__sys_vfork_child());",
          "\treturn close_range_around(first, last, flags, !flags);")],
        ["e2e:test_shm.py -k 'runs_a_subprocess'"]),
    Mutant(
        "vfork-exec-counts-no-holder",
        "an exec from a vfork child does not count the new program among the end's holders: it leaves the tier "
        "while the parent holds the end",
        [("src/fastpath/shm_exec.c",
          "\tif (!lf__sys_vfork_child())\n\t\treturn; /* an exec of this process: the same holder */",
          "\tif (1)\n\t\treturn; /* an exec of this process: the same holder */")],
        ["e2e:test_shm.py -k 'only_when_one_process'"]),
    Mutant(
        "vfork-exec-memfd-not-reopened",
        "an exec from a vfork child that closed the ring's memfd records the socket without it: the new program "
        "gets the socket shut down",
        [("src/fastpath/shm_exec.c",
          "\t} else if (vforked && r.mfd < 0) {",
          "\t} else if (0) {")],
        ["e2e:test_shm.py -k 'runs_a_subprocess or only_when_one_process'"]),
    Mutant(
        "vfork-exec-socket-by-number",
        "an exec from a vfork child takes each descriptor's connection from the table by number, where the child "
        "dup2'd another socket",
        [("src/fastpath/shm_exec.c",
          "\tif (!vforked)\n\t\treturn c;",
          "\tif (1)\n\t\treturn c;")],
        ["e2e:test_shm.py -k 'runs_a_subprocess'"]),
    Mutant(
        "vfork-exec-shut-by-number",
        "an exec into a program without loopfast from a vfork child looks each recorded socket up by its number "
        "in the parent's table: a socket dup2'd to stdin is shut down instead of leaving the tier",
        [("src/fastpath/shm_exec.c",
          "\t\tstruct lf_shm_conn *c = conn_for(fd, vforked);",
          "\t\tstruct lf_shm_conn *c = vforked ? lf__shm_conn_of(fd) : conn_for(fd, vforked);")],
        ["e2e:test_shm.py -k 'as_its_stdin'"]),
    Mutant(
        "leave-answers-through-a-number-not-its-own",
        "a leave answers for the peer end through the table's number without checking that the number names "
        "that socket here (a vfork child closed it): the answer fails and the connection is shut down",
        [("src/fastpath/shm_leave.c",
          "\t\tif (peer && atomic_load(&p->tx.h->leave) == LF_LEAVE_ASK && lf__shm_ours(fd, p->kept_ino))",
          "\t\tif (peer && atomic_load(&p->tx.h->leave) == LF_LEAVE_ASK)")],
        ["e2e:test_shm.py -k 'as_its_stdin or passing_a_tier_socket_to'"]),
    Mutant(
        "vfork-check-trusts-a-stale-pid",
        "the fork handlers are registered only once a socket is used: a worker forked before any socket that "
        "dropped its privileges (kcmp cannot say) is taken for a vfork child, and its closes leave the table's "
        "entries behind",
        [("src/fastpath/fork.c",
          "__attribute__((constructor)) static void fork_load(void)\n{\n\tlf__fork_init();\n}",
          "__attribute__((constructor)) static void fork_load(void)\n{\n}")],
        ["e2e:test_shm.py -k 'forked_before_any_socket'"]),
    Mutant(
        "shm-pass-waits-when-it-must-not",
        "a non-blocking pass of a client before its answer waits for the answer all the same",
        [("src/fastpath/shm_pass.c",
          "\t\t\tif (atomic_load(&sc->state) == UNDECIDED && !(flags & MSG_DONTWAIT) &&\n"
          "\t\t\t    (end || !lf__sys_file_nonblocking(fd))) {",
          "\t\t\tif (atomic_load(&sc->state) == UNDECIDED) {")],
        ["e2e:test_shm.py -k 'non_blocking_pass'"]),
    Mutant(
        "vfork-exec-try-keeps-its-count",
        "a vfork child's exec that fails (a PATH search's tries) keeps the holder it counted and the memfd it "
        "opened again",
        [("src/fastpath/shm_exec.c",
          "\t\telse\n\t\t\tlf__sys_close(~undo[i]); /* opened again for the exec (reopen) */\n"
          "\tif (counted)\n\t\tlf__shm_exec_counted(counted, false);",
          "\t\telse\n\t\t\t; /* opened again for the exec (reopen) */\n"
          "\tif (counted && 0)\n\t\tlf__shm_exec_counted(counted, false);")],
        ["e2e:test_shm.py -k 'only_when_one_process'"]),
    Mutant(
        "vfork-check-cannot-say-means-not-shared",
        "a vfork child whose kcmp cannot compare it with its parent (the parent dropped root: not dumpable) "
        "counts as a process of its own: its closes drop the parent's connections",
        [("src/fastpath/sys.c",
          "\tif (k == 0 || (k < 0 && errno != ESRCH)) {",
          "\tif (k == 0) {")],
        ["e2e:test_shm.py -k 'runs_a_subprocess'"]),
    Mutant(
        "shm-pass-fresh-client-refused",
        "a client passed before the server's answer has come is refused at once (EOPNOTSUPP), as before: the pass "
        "does not wait for the answer",
        [("src/fastpath/shm_pass.c",
          "\t\t\t\tlf__shm_decide_by(sc, x, end);\n",
          "\t\t\t\t(void)end;\n")],
        ["e2e:test_shm.py -k 'loopfast_receiver and fresh'"]),
    Mutant(
        "shm-leave-poll-takes-an-unasked-left",
        "poll takes a peer's leave byte off the socket though this end never answered a request: the connection "
        "resets without telling the application, whose read then takes the byte as data",
        [("src/fastpath/shm.c",
          "if (r == 1 && b == LF_BYTE_LEFT && atomic_load(&c->tx_left) && lf__ring_avail(&c->rx) == 0 &&",
          "if (r == 1 && b == LF_BYTE_LEFT && lf__ring_avail(&c->rx) == 0 &&")],
        ["e2e:test_security.py -k 'garbage_in_the_rings and left'"]),
    Mutant(
        "shm-pass-mmsg-domain-forgotten",
        "recvmmsg takes a Unix socket it asked about before for one of another family: from its second call a "
        "tier socket arrives without its rings (the kernel cuts the socket off the narrow control buffer)",
        [("src/fastpath/io.c",
          "& LF_F_UNIX))\n\t\treturn true;\n",
          "& LF_F_UNIX))\n\t\treturn false;\n")],
        ["e2e:test_shm.py -k passing_a_tier_socket_to_itself"]),
    Mutant(
        "shm-fork-before-answer-no-board",
        "a fork before a client's answer gives its processes no board: the one that takes the answer goes onto "
        "the rings, the other reads and writes the stream (the server resets the connection)",
        [("src/fastpath/shm.c",
          "\t\tif (!c->board && atomic_load(&c->state) == UNDECIDED)\n\t\t\tlf__shm_board_make(c);",
          "\t\tif (0)\n\t\t\tlf__shm_board_make(c);")],
        ["e2e:test_shm.py -k forked_before_its_answer"]),
    Mutant(
        "shm-board-stream-count-private",
        "a client forked before its answer counts its stream bytes in its own process only: the process that "
        "takes the answer tells the server too few, and the server reads the rest of the stream as tokens",
        [("src/fastpath/shm_answer.c",
          "\treturn c->board ? &c->board->stream_out : &c->stream_out;",
          "\treturn &c->stream_out;")],
        ["e2e:test_shm.py -k 'forked_before_its_answer and 0.3'"]),
    Mutant(
        "shm-board-adopter-stays-on-the-stream",
        "a process whose sibling took the answer takes the connection for refused and writes on the stream, which "
        "the server no longer reads",
        [("src/fastpath/shm_answer.c",
          "\tif (st == OFF) {\n\t\tlf__shm_set_state(c, OFF);",
          "\tif (1) {\n\t\tlf__shm_set_state(c, OFF);")],
        ["e2e:test_shm.py -k forked_before_its_answer"]),
    Mutant(
        "shm-lt-restore-skipped-for-another-set",
        "an epoll wait's restore takes an epoll_ctl of the socket in another set for a change of its own: the "
        "first of two sets stays edge-triggered",
        [("src/fastpath/shm.c",
          "\t\t\t\tchanged = f->ep[r].gen != p->sgen;",
          "\t\t\t\tchanged = true;")],
        ["e2e:test_shm.py -k 'two_sets and late'"]),
    Mutant(
        "shm-board-not-carried-by-exec",
        "an exec records a client forked before its answer without its board: the new program takes the answer "
        "alone and tells the server its own count of stream bytes, not the other process's",
        [("src/fastpath/shm_exec.c",
          "\tint mfd = kind == 'u' ? c->bfd : c->mfd;",
          "\tint mfd = kind == 'u' ? -1 : c->mfd;")],
        ["e2e:test_shm.py -k 'forked_before_its_answer and exec'"]),
    Mutant(
        "shm-board-close-keeps-its-holder",
        "a process's last close of a connection with a board leaves its holder counted: the last process is never "
        "alone, keeps the answer's byte at its close, and the server is reset",
        [("src/fastpath/shm.c",
          "\tif (c->board)\n\t\tlf__shm_board_holder(c, false);",
          "\tif (c->board)\n\t\t;")],
        ["e2e:test_shm.py -k 'forked_before_its_answer and closes'"]),
]
