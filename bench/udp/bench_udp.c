/* `loopfast bench udp`: seed 002's UDP server family and traffic generator.
 *
 * Each run binds a fresh UDP socket on 127.0.0.1, then either
 *  - drain: queues --count datagrams (and end markers) into a receive buffer
 *    made large enough to hold them all, then starts the server, which
 *    isolates the receiver's cost on a small machine; or
 *  - rate: starts the server, and --generators processes flood it with
 *    sendmmsg for --time seconds; then end markers are sent until the server
 *    has seen one (at most 2 s) and the socket's drop counter is read.
 * Designs, sizes and modes are interleaved within each repetition so that
 * noise hits them alike; the table reports medians and the spread.
 * This file parses the options and makes the runs; udp_report.c turns the
 * samples into the table, the JSON and the plot.
 */
#include "cmdline.h"
#include "udp.h"
#include "udp_designs.h"
#include "udp_report.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void usage(void)
{
	printf("usage: loopfast bench udp [--mode rate|drain[,..]] [--size N[,..]] [--designs LIST]\n"
	       "         [--threads N] [--work N] [--time S] [--count N] [--repeat R]\n"
	       "         [--generators G] [--json FILE] [--plot FILE.png]\n\ndesigns:\n");
	for (unsigned i = 0; i < udp_ndesigns; i++)
		printf("  %-12s %s\n", udp_designs[i].name, udp_designs[i].what);
}

static int parse_opts(int argc, char **argv, struct udp_opts *o)
{
	unsigned long long v, sizes[8] = { 64 }; /* --size */
	bool any_design = false;
	int err = 0;

	*o = (struct udp_opts){ .modes = UDP_MODE_DRAIN, .nsizes = 1, .threads = 2,
			    .repeat = 3, .generators = 1, .seconds = 2, .count = 300000 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		char list[256], *save, *tok;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage();
			return 1;
		}
		if (strncmp(a, "--", 2))
			return lf_cli_error("bench udp: unexpected argument '%s' (see --help)", a);
		if (!val)
			return lf_cli_error("bench udp: %s needs a value", a);
		i++;
		if (!strcmp(a, "--mode")) {
			o->modes = 0;
			snprintf(list, sizeof(list), "%s", val);
			for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				if (!strcmp(tok, "rate"))
					o->modes |= UDP_MODE_RATE;
				else if (!strcmp(tok, "drain"))
					o->modes |= UDP_MODE_DRAIN;
				else
					return lf_cli_error("bench udp: --mode must be rate or drain, not '%s'", tok);
			}
			if (!o->modes)
				return lf_cli_error("bench udp: --mode needs rate or drain");
		} else if (!strcmp(a, "--size")) {
			err = lf_cli_parse_uints("bench udp: --size", val, 16, 8192, sizes, 8, &o->nsizes);
		} else if (!strcmp(a, "--designs")) {
			memset(o->designs, 0, sizeof(o->designs));
			snprintf(list, sizeof(list), "%s", val);
			for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				int d = udp_find_design(tok);
				if (d < 0)
					return lf_cli_error("bench udp: unknown design '%s' (see --help)", tok);
				o->designs[d] = true;
				any_design = true;
			}
			if (!any_design)
				return lf_cli_error("bench udp: --designs needs at least one design");
		} else if (!strcmp(a, "--threads")) {
			err = lf_cli_parse_uint("bench udp: --threads", val, 1, 64, &v) ?: (o->threads = (unsigned)v, 0);
		} else if (!strcmp(a, "--work")) {
			err = lf_cli_parse_uint("bench udp: --work", val, 0, 10000000, &v) ?: (o->work = (unsigned)v, 0);
		} else if (!strcmp(a, "--repeat")) {
			err = lf_cli_parse_uint("bench udp: --repeat", val, 1, 100, &v) ?: (o->repeat = (unsigned)v, 0);
		} else if (!strcmp(a, "--generators")) {
			err = lf_cli_parse_uint("bench udp: --generators", val, 1, 16, &v) ?: (o->generators = (unsigned)v, 0);
		} else if (!strcmp(a, "--count")) {
			err = lf_cli_parse_uint("bench udp: --count", val, 1, 5000000, &o->count);
		} else if (!strcmp(a, "--time")) {
			err = lf_cli_parse_seconds("bench udp: --time", val, 0.1, 600, &o->seconds);
		} else if (!strcmp(a, "--json")) {
			o->json = val;
		} else if (!strcmp(a, "--plot")) {
			o->plot = val;
		} else {
			return lf_cli_error("bench udp: unknown option '%s' (see --help)", a);
		}
		if (err)
			return err;
	}
	for (unsigned k = 0; k < o->nsizes; k++)
		o->sizes[k] = (unsigned)sizes[k];
	if (!any_design)
		for (unsigned i = 0; i < udp_ndesigns; i++)
			o->designs[i] = true;
	return 0;
}

static int bind_loopback(uint16_t *port, size_t rcvbuf)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int v = rcvbuf > INT_MAX / 2 ? INT_MAX / 2 : (int)rcvbuf;

	if (fd < 0)
		return -errno;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	/* As root the limit rmem_max can be passed; otherwise it caps us. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
	*port = ntohs(sa.sin_port);
	return fd;
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct server_thread {
	const struct udp_design *d;
	struct udp_run *run;
	int ret;
};

static void *server_main(void *arg)
{
	struct server_thread *st = arg;

	st->ret = st->d->serve(st->run);
	atomic_store(&st->run->stop, true);
	return NULL;
}

/* Joins the server, setting the stop flag at `deadline` (ns); servers
 * check it at least every 100 ms. */
static void join_by(pthread_t th, struct udp_run *run, uint64_t deadline)
{
	for (;;) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		if (!pthread_timedjoin_np(th, NULL, &ts))
			return;
		if (udp_now_ns() > deadline)
			atomic_store(&run->stop, true);
	}
}

/* Forks the generators; each waits for a byte on `go`, floods, and writes
 * its count to `res`. Returns the number started or -errno. */
static int start_generators(const struct udp_opts *o, uint16_t port, unsigned size,
			    pid_t *pids, int go[2], int res[2])
{
	int n = 0;

	if (pipe2(go, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(res, O_CLOEXEC) < 0) {
		int e = errno;
		close(go[0]);
		close(go[1]);
		return -e;
	}
	for (unsigned g = 0; g < o->generators; g++) {
		pid_t pid = fork();
		if (pid < 0)
			break;
		if (pid == 0) {
			char b;
			long long sent = -1;
			prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the bench */
			if (getppid() == 1)
				_exit(1);
			close(go[1]);
			close(res[0]);
			if (read(go[0], &b, 1) == 1)
				sent = udp_generate(port, size, 0, o->seconds);
			if (write(res[1], &sent, sizeof(sent)) < 0)
				_exit(1);
			_exit(0);
		}
		pids[n++] = pid;
	}
	close(go[0]);
	close(res[1]);
	return n;
}

static int run_one(const struct udp_opts *o, int mode, unsigned size, unsigned di, struct udp_sample *s)
{
	const struct udp_design *d = &udp_designs[di];
	struct udp_run run = { .size = size, .work = o->work, .threads = d->multi ? o->threads : 1 };
	struct server_thread st = { .d = d, .run = &run };
	size_t rcvbuf = 4u << 20;
	pthread_t th;
	uint16_t port = 0;
	long long drops0, sent = 0;
	double cpu0;
	int fd, ret;

	if (mode == UDP_MODE_DRAIN)
		rcvbuf = (size_t)o->count * (size + 1536) + (1u << 20); /* a generous truesize */
	fd = bind_loopback(&port, rcvbuf);
	if (fd < 0)
		return fd;
	run.fd = fd;
	if (udp_socket_stat(port, &drops0, NULL) < 0)
		drops0 = -1;
	*s = (struct udp_sample){ .mode = mode, .size = size, .design = di, .threads = run.threads };

	if (mode == UDP_MODE_DRAIN) {
		sent = udp_generate(port, size, o->count, 0);
		for (; s->markers < 4 && sent >= 0; s->markers++)
			udp_send_marker(fd, port);
		if (sent < 0) {
			close(fd);
			return (int)sent;
		}
		cpu0 = cpu_seconds();
		if ((ret = pthread_create(&th, NULL, server_main, &st))) {
			close(fd);
			return -ret;
		}
		join_by(th, &run, udp_now_ns() + 30000000000ull + o->count * 10000ull);
	} else {
		pid_t pids[16];
		int go[2], res[2], n;

		n = start_generators(o, port, size, pids, go, res);
		if (n < 0) {
			close(fd);
			return n;
		}
		cpu0 = cpu_seconds();
		ret = pthread_create(&th, NULL, server_main, &st);
		if (!ret && write(go[1], "gggggggggggggggg", (size_t)n) != n)
			ret = errno;
		close(go[1]);
		/* Collect the generators' counts (bounded by --time + 10 s). */
		uint64_t deadline = udp_now_ns() + (uint64_t)((o->seconds + 10) * 1e9);
		for (int got = 0; got < n && udp_now_ns() < deadline;) {
			struct pollfd p = { .fd = res[0], .events = POLLIN };
			long long c;
			if (poll(&p, 1, 100) == 1) {
				if (read(res[0], &c, sizeof(c)) != sizeof(c))
					break;
				sent += c > 0 ? c : 0;
				got++;
			}
		}
		close(res[0]);
		for (int i = 0; i < n; i++) {
			if (waitpid(pids[i], NULL, WNOHANG) == 0) {
				kill(pids[i], SIGKILL);
				waitpid(pids[i], NULL, 0);
			}
		}
		if (ret) {
			atomic_store(&run.stop, true);
			close(fd);
			return -ret;
		}
		/* Let the server work the queue down first so that the
		 * markers are not dropped (they would count as lost), then
		 * send markers until it has seen one. */
		deadline = udp_now_ns() + 1000000000ull;
		while (!atomic_load(&run.stop) && udp_now_ns() < deadline) {
			long long queued = 0;
			if (udp_socket_stat(port, NULL, &queued) < 0 || !queued)
				break;
			usleep(1000);
		}
		deadline = udp_now_ns() + 2000000000ull;
		while (!atomic_load(&run.stop) && udp_now_ns() < deadline) {
			udp_send_marker(fd, port);
			s->markers++;
			usleep(2000);
		}
		join_by(th, &run, udp_now_ns());
	}
	s->cpu_ns = (cpu_seconds() - cpu0) * 1e9;
	long long drops1 = -1;
	if (udp_socket_stat(port, &drops1, NULL) < 0)
		drops1 = -1;
	close(fd);

	s->sent = (unsigned long long)sent;
	s->received = atomic_load(&run.count);
	s->drops = drops0 >= 0 && drops1 >= 0 ? drops1 - drops0 : -1;
	s->marker = atomic_load(&run.marker);
	s->err = st.ret;
	/* drain: from the first receive call (the data is waiting); rate:
	 * from the first datagram, as the seed's servers time it. */
	uint64_t t0 = atomic_load(mode == UDP_MODE_DRAIN ? &run.t_start : &run.t_first);
	uint64_t t1 = atomic_load(&run.t_last);
	s->seconds = t1 > t0 ? (t1 - t0) / 1e9 : 0;
	s->rate = s->seconds > 0 ? s->received / s->seconds : 0;
	s->cpu_ns = s->received ? s->cpu_ns / s->received : 0;
	return 0;
}

int cmd_bench_udp(int argc, char **argv)
{
	struct udp_opts o;
	struct udp_sample *samples;
	struct udp_summary *sum;
	unsigned ns = 0, nm, nd = 0;
	int ret = parse_opts(argc, argv, &o);

	if (ret)
		return ret == 1 ? 0 : ret;
	for (unsigned i = 0; i < udp_ndesigns; i++)
		nd += o.designs[i];
	unsigned total = o.repeat * o.nsizes * 2 * nd;
	samples = calloc(total, sizeof(*samples));
	sum = calloc(total, sizeof(*sum));
	if (!samples || !sum) {
		free(samples);
		free(sum);
		return lf_cli_error("bench udp: out of memory");
	}
	signal(SIGPIPE, SIG_IGN);
	for (unsigned r = 0; r < o.repeat; r++)
		for (int mode = UDP_MODE_RATE; mode <= UDP_MODE_DRAIN; mode++) {
			if (!(o.modes & mode))
				continue;
			for (unsigned z = 0; z < o.nsizes; z++)
				for (unsigned d = 0; d < udp_ndesigns; d++) {
					if (!o.designs[d])
						continue;
					ret = run_one(&o, mode, o.sizes[z], d, &samples[ns]);
					if (ret < 0) {
						free(samples);
						free(sum);
						return lf_cli_error("bench udp: %s run of %s failed: %s", udp_mode_name(mode),
								    udp_designs[d].name, strerror(-ret));
					}
					samples[ns++].repeat = r;
					if (!lf_cli_json && isatty(2))
						fprintf(stderr, "\r%u/%u runs", ns, total / (o.modes == 3 ? 1 : 2));
				}
		}
	if (!lf_cli_json && isatty(2))
		fprintf(stderr, "\r\033[K");
	udp_summarize(samples, ns, sum, &nm);
	if (lf_cli_json && !(o.json && !strcmp(o.json, "-")))
		udp_write_json("-", &o, samples, ns, sum, nm);
	else if (!lf_cli_json && !(o.json && !strcmp(o.json, "-")))
		udp_print_table(&o, sum, nm);

	char tmp[] = "/tmp/loopfast-udp-XXXXXX.json";
	const char *json = o.json;
	if (!json && o.plot) {
		int fd = mkstemps(tmp, 5);
		if (fd < 0) {
			ret = lf_cli_error("bench udp: cannot create a temporary file for --plot");
			goto out;
		}
		close(fd);
		json = tmp;
	}
	if (json && (ret = udp_write_json(json, &o, samples, ns, sum, nm)) < 0) {
		ret = lf_cli_error("bench udp: cannot write %s: %s", json, strerror(-ret));
		goto out;
	}
	ret = o.plot ? udp_plot(json, o.plot) : 0;
	if (json == tmp)
		unlink(tmp);
	for (unsigned i = 0; i < ns && !ret; i++)
		if (samples[i].err)
			ret = lf_cli_error("bench udp: the %s server failed: %s", udp_designs[samples[i].design].name,
					   strerror(-samples[i].err));
out:
	free(samples);
	free(sum);
	return ret;
}
