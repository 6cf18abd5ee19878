/* A client that forks from a signal handler while its main loop sends
 * and receives on a socket still waiting for the server's answer (the
 * server accepts 10 s later): SIGALRM every 500 us forks a child that
 * exits at once (test_shm.py). The handler's fork runs the fork's
 * prepare in the thread the signal interrupted, maybe inside a call on
 * that socket. Prints "done CALLS FORKS" after 2 s. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t forks;

static void on_alarm(int sig)
{
	(void)sig;
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	if (p > 0)
		forks++;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof sa;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(s, (void *)&sa, sizeof sa) || listen(s, 8) || getsockname(s, (void *)&sa, &l))
		return 2;
	pid_t srv = fork();
	if (srv == 0) {
		sleep(10);
		_exit(0);
	}
	close(s);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(c, (void *)&sa, sizeof sa))
		return 2;
	fcntl(c, F_SETFL, O_NONBLOCK);
	struct sigaction act = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	sigaction(SIGALRM, &act, NULL);
	struct itimerval it = { { 0, 500 }, { 0, 500 } };
	setitimer(ITIMER_REAL, &it, NULL);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long calls = 0;
	char b;
	do {
		send(c, "x", 1, MSG_NOSIGNAL);
		recv(c, &b, 1, 0);
		calls += 2;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < 2);
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	printf("done %ld %d\n", calls, (int)forks);
	kill(srv, SIGKILL);
	return 0;
}
