/* A client's blocking 4 MiB write, made before its server accepts (or,
 * "answered", after), in the ways a blocking TCP write ends short; it
 * prints what a program sees, not the counts (TCP's buffers are larger
 * than the tier's stream): test_shm.py runs it over TCP and over the
 * tier and compares.
 *
 *   closed      the server accepts at 0.3 s and closes without reading:
 *               the write returns a count, the next one the reset
 *               (SIGPIPE at its default: none comes)
 *   unaccepted  the listener is closed at 0.3 s, never accepting: the same
 *   sndtimeo    SO_SNDTIMEO 1 s; the server accepts at 0.9 s and reads
 *               nothing: one timeout for the whole call
 *   restart     a SIGALRM handler with SA_RESTART at 0.3 s; the server
 *               accepts at 1 s and reads all: the write returns what it
 *               sent before the signal, as TCP's (SA_RESTART restarts only
 *               a call that sent nothing)
 *   answered    as restart, the server accepting first (the ring's waits) */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BIG (4 << 20)

static void on_alarm(int s) { (void)s; }

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The kernel's word that the connection came onto the tier: its ring
 * mapped in this process. */
static int rings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "memfd:loopfast-shm") != NULL;
	if (f)
		fclose(f);
	return n;
}

static const char *count(ssize_t w)
{
	return w < 0 ? strerror(errno) : w == 0 ? "0" : w < BIG ? "short" : "all";
}

static void client(const char *mode, struct sockaddr_in *a)
{
	static char buf[BIG];
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (!strcmp(mode, "sndtimeo")) {
		struct timeval tv = { 1, 0 };
		setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if (!strcmp(mode, "restart") || !strcmp(mode, "answered")) {
		struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
		sigaction(SIGALRM, &sa, NULL);
	}
	if (connect(c, (void *)a, sizeof(*a))) {
		perror("connect");
		_exit(1);
	}
	if (!strcmp(mode, "answered")) { /* the server's accept, and the tier's answer, come first */
		char x;
		usleep(200000);
		recv(c, &x, 1, MSG_DONTWAIT);
	}
	if (!strcmp(mode, "restart") || !strcmp(mode, "answered"))
		ualarm(300000, 0);
	double t0 = now();
	errno = 0;
	ssize_t w = write(c, buf, BIG);
	double took = now() - t0;
	printf("write: %s\n", count(w));
	printf("#rings %d\n", rings());
	if (!strcmp(mode, "sndtimeo"))
		printf("within the timeout and a half: %d\n", took < 1.5);
	if (!strcmp(mode, "closed") || !strcmp(mode, "unaccepted")) {
		usleep(100000);
		errno = 0;
		w = write(c, buf, BIG);
		printf("next write: %s\n", count(w));
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "closed";
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	static char b[1 << 20];
	ssize_t r;
	size_t got = 0;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (bind(l, (void *)&a, sizeof(a)) || listen(l, 1) || getsockname(l, (void *)&a, &al))
		return 1;
	pid_t p = fork();
	if (!p) {
		close(l);
		signal(SIGPIPE, SIG_DFL);
		client(mode, &a);
	}
	int s = -1;
	if (!strcmp(mode, "closed")) {
		usleep(300000);
		close(accept(l, NULL, NULL));
	} else if (!strcmp(mode, "unaccepted")) {
		usleep(300000);
	} else if (!strcmp(mode, "sndtimeo")) {
		usleep(900000);
		s = accept(l, NULL, NULL);
	} else {
		if (!strcmp(mode, "restart"))
			sleep(1);
		s = accept(l, NULL, NULL);
		if (!strcmp(mode, "answered"))
			sleep(1);
		while ((r = read(s, b, sizeof(b))) > 0)
			got += (size_t)r;
		printf("server read: %s\n", got == 0 ? "0" : got < BIG ? "short" : "all");
	}
	close(l);
	int st;
	waitpid(p, &st, 0);
	if (WIFSIGNALED(st))
		printf("client killed by signal %d\n", WTERMSIG(st));
	if (s >= 0)
		close(s);
	return 0;
}
