"""What the kernel's seccomp user notification costs on this machine,
without loopfast (docs/supervisor.md, Cost): a thread of one process
traps dup() (SECCOMP_RET_USER_NOTIF), the main thread is its supervisor
and answers each call in one of three ways, in interleaved rounds:
  (a) NOTIF_SEND                      a trapped call's bare round trip
  (b) NOTIF_ADDFD with SETFD, then NOTIF_SEND
                                      what a switched connect needs (its
                                      answer is 0, not the fd's number)
  (c) NOTIF_ADDFD with SETFD|SEND     one step (what accept uses: the
                                      call returns the fd's number)
each without and with SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (which loopfast
run's supervisor sets). Prints the median and range of microseconds a
call over the rounds, and each way's per-round ratio to (a).
Usage: python3 bench/supervisor/roundtrip.py"""
import os
import subprocess
import tempfile

RT = r"""#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
static volatile int lfd = -1, mode, N = 3000, done;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int sock;
#define R 15
static double res[3][R];
static int cmp(const void *a, const void *b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static void *worker(void *x)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_dup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog p = { 4, f };
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	lfd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &p);
	if (getenv("SYNC")) ioctl(lfd, SECCOMP_IOCTL_NOTIF_SET_FLAGS, 1UL);
	for (int k = 0; k < 3 * R; k++) {
		int m = k % 3;
		while (mode != k) usleep(100);
		double t0 = now();
		for (int i = 0; i < N; i++) syscall(SYS_dup, 0);
		res[m][k / 3] = (now() - t0) / N;
		mode = k + 1000;
	}
	done = 1;
	return x;
}
int main(void)
{
	pthread_t t;
	sock = socket(AF_UNIX, SOCK_STREAM, 0);
	pthread_create(&t, NULL, worker, NULL);
	while (lfd < 0) usleep(1000);
	for (int k = 0; k < 3 * R; k++) {
		int m = k % 3;
		mode = k;
		for (int i = 0; i < N; i++) {
			struct seccomp_notif n; memset(&n, 0, sizeof(n));
			if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_RECV, &n)) { perror("recv"); return 1; }
			struct seccomp_notif_addfd a = { .id = n.id, .flags = SECCOMP_ADDFD_FLAG_SETFD, .srcfd = sock, .newfd = 100 };
			struct seccomp_notif_resp r = { .id = n.id };
			if (m == 2) a.flags |= SECCOMP_ADDFD_FLAG_SEND;
			if (m && ioctl(lfd, SECCOMP_IOCTL_NOTIF_ADDFD, &a) < 0) { perror("addfd"); return 1; }
			if (m != 2 && ioctl(lfd, SECCOMP_IOCTL_NOTIF_SEND, &r)) { perror("send"); return 1; }
		}
		while (mode != k + 1000) usleep(100);
	}
	pthread_join(t, NULL);
	for (int m = 0; m < 3; m++) {
		double b[R]; for (int i = 0; i < R; i++) b[i] = res[m][i] / res[0][i];
		qsort(res[m], R, sizeof(double), cmp); qsort(b, R, sizeof(double), cmp);
		printf("%s: median %.2f us a call (%.2f-%.2f), per round / (a): median %.2f (%.2f-%.2f)\n",
		       m == 0 ? "(a) trap, SEND" : m == 1 ? "(b) trap, ADDFD+SETFD, SEND" : "(c) trap, ADDFD SETFD|SEND",
		       res[m][R / 2], res[m][0], res[m][R - 1], b[R / 2], b[0], b[R - 1]);
	}
	return 0;
}
"""


def main():
    with tempfile.TemporaryDirectory(prefix="lf-svrt-") as d:
        src, exe = os.path.join(d, "rt.c"), os.path.join(d, "rt")
        open(src, "w").write(RT)
        subprocess.run(["cc", "-O2", "-pthread", "-o", exe, src], check=True)
        for sync in ("", "1"):
            print("SYNC_WAKE_UP" if sync else "without SYNC_WAKE_UP")
            env = dict(os.environ, SYNC=sync) if sync else {k: v for k, v in os.environ.items() if k != "SYNC"}
            print(subprocess.run([exe], env=env, capture_output=True, text=True, check=True).stdout, end="")
    print("load average:", open("/proc/loadavg").read().strip())


main()
