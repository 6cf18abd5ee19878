/* siginterrupt(SIGALRM, 1); signal(SIGALRM, h); alarm(1); read(pipe):
 * glibc's signal() leaves SA_RESTART out for a signal siginterrupt marked,
 * so the read ends with EINTR after the handler ran. Prints
 * "EINTR handled=1" (or what happened instead) and exits 0. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static volatile sig_atomic_t handled;

static void on_alarm(int sig)
{
	(void)sig;
	handled++;
}

int main(void)
{
	int p[2];
	char b;

	if (pipe(p))
		return 1;
	siginterrupt(SIGALRM, 1);
	signal(SIGALRM, on_alarm);
	alarm(1);
	ssize_t r = read(p[0], &b, 1);
	printf("%s handled=%d\n", r < 0 ? strerror(errno) : "data", (int)handled);
	return 0;
}
