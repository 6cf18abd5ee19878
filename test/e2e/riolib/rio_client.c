/* A program that uses Registered I/O, for test_rio_lib.py, which compiles
 * it twice: linked with libloopfast-rio alone, and (-DLF_FAST) with
 * libloopfast too, opting its socket in (the control).
 *
 * usage: rio_client PORT [NAME...]
 * For each NAME, prints "NAME FILE": the object that defines the symbol the
 * program's calls to NAME bind to (dlsym(RTLD_DEFAULT) and dladdr). With a
 * PORT (not 0), connects TCP to 127.0.0.1:PORT, prints "connected", waits
 * for its stdin to close, then sends "ping" and reads the echo through a
 * request queue, and prints "echoed". Exit 0, or 1 with a line on stderr. */
#define _GNU_SOURCE /* dladdr */
#include <loopfast/rio.h>
#ifdef LF_FAST
#include <loopfast.h>
#endif

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what, int err)
{
	fprintf(stderr, "rio_client: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

/* One request on rq, and its one result from cq. */
static void one(struct lf_rio_cq *cq, int ret, const char *what)
{
	struct lf_rio_result res;
	int n;

	if (ret < 0)
		fail(what, ret);
	n = lf_rio_dequeue_wait(cq, &res, 1, 10000);
	if (n != 1)
		fail(what, n < 0 ? n : -ETIMEDOUT);
	if (res.status < 0)
		fail(what, res.status);
	if (res.bytes != 4)
		fail(what, -EMSGSIZE);
}

static void echo(int fd)
{
	struct lf_rio_notify polled = { .type = LF_RIO_POLLED };
	struct lf_rio_buf out = { 0, 0, 4 }, in = { 0, 64, 4 };
	struct lf_rio *rio;
	struct lf_rio_cq *cq;
	struct lf_rio_rq *rq;
	char *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int ret;

	if (mem == MAP_FAILED)
		fail("mmap", errno);
	if ((ret = lf_rio_open(&rio)) < 0)
		fail("lf_rio_open", ret);
	if ((ret = lf_rio_register_buffer(rio, mem, 4096)) < 0)
		fail("lf_rio_register_buffer", ret);
	out.id = in.id = (uint32_t)ret;
	if ((ret = lf_rio_cq_create(rio, 8, &polled, &cq)) < 0)
		fail("lf_rio_cq_create", ret);
	if ((ret = lf_rio_rq_create(rio, fd, 1, 1, cq, cq, NULL, &rq)) < 0)
		fail("lf_rio_rq_create", ret);
	memcpy(mem, "ping", 4);
	one(cq, lf_rio_send(rq, &out, 0, NULL), "lf_rio_send");
	one(cq, lf_rio_receive(rq, &in, 0, NULL), "lf_rio_receive");
	if (memcmp(mem + 64, "ping", 4) != 0)
		fail("the echo", -EBADMSG);
	if ((ret = lf_rio_rq_close(rq)) < 0 || (ret = lf_rio_cq_close(cq)) < 0 ||
	    (ret = lf_rio_deregister_buffer(rio, (int)out.id)) < 0 || (ret = lf_rio_close(rio)) < 0)
		fail("closing", ret);
	printf("echoed\n");
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char c;
	int fd;

	if (argc < 2)
		return fprintf(stderr, "usage: rio_client PORT [NAME...]\n"), 2;
	for (int i = 2; i < argc; i++) {
		Dl_info info;
		void *sym = dlsym(RTLD_DEFAULT, argv[i]);

		printf("%s %s\n", argv[i], sym && dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "-");
	}
	sa.sin_port = htons((uint16_t)atoi(argv[1]));
	if (!sa.sin_port)
		return 0;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		fail("socket", errno);
#ifdef LF_FAST
	int ret = lf_enable_fast_path(fd);
	if (ret < 0)
		fail("lf_enable_fast_path", ret);
	if (getenv("RIO_CLIENT_SHM") && (ret = lf_set_tier(fd, LF_TIER_SHM)) < 0)
		fail("lf_set_tier", ret);
#endif
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		fail("connect", errno);
#ifdef LF_FAST
	int tier = -1;
	socklen_t tl = sizeof(tier);
	if (getenv("RIO_CLIENT_SHM") && getsockopt(fd, SOL_LOOPFAST, LOOPFAST_TIER, &tier, &tl) == 0)
		printf("tier %d\n", tier);
#endif
	printf("connected\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	echo(fd);
	close(fd);
	return 0;
}
