/* The traffic generator (seed 002's, with sendmmsg) and the kernel's UDP
 * drop counters. It only ever sends to 127.0.0.1. */
#include "udp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sa;
}

long long udp_generate(uint16_t port, unsigned size, unsigned long long count, double seconds)
{
	static char buf[65536];
	struct sockaddr_in sa = loopback(port);
	struct mmsghdr msgs[UDP_BATCH];
	struct iovec iov = { .iov_base = buf, .iov_len = size };
	unsigned long long sent = 0;
	uint64_t end = seconds > 0 ? udp_now_ns() + (uint64_t)(seconds * 1e9) : 0;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (size > sizeof(buf) || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = size > sizeof(buf) ? EMSGSIZE : errno;
		close(fd);
		return -e;
	}
	memset(buf, 'd', size);
	memset(msgs, 0, sizeof(msgs));
	for (int i = 0; i < UDP_BATCH; i++) {
		msgs[i].msg_hdr.msg_iov = &iov;
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	while (count ? sent < count : udp_now_ns() < end) {
		unsigned want = UDP_BATCH;
		if (count && count - sent < want)
			want = (unsigned)(count - sent);
		int n = sendmmsg(fd, msgs, want, 0);
		if (n < 0) {
			/* ECONNREFUSED: the ICMP of a datagram sent before the
			 * server bound; ENOBUFS: transient. Neither loses count. */
			if (errno == EINTR || errno == ENOBUFS || errno == ECONNREFUSED)
				continue;
			int e = errno;
			close(fd);
			return -e;
		}
		sent += (unsigned)n;
	}
	close(fd);
	return (long long)sent;
}

int udp_send_marker(int fd, uint16_t port)
{
	struct sockaddr_in sa = loopback(port);
	char b = 'm';

	return sendto(fd, &b, UDP_MARKER_SIZE, MSG_DONTWAIT, (struct sockaddr *)&sa, sizeof(sa)) < 0
		       ? -errno : 0;
}

int udp_socket_stat(uint16_t port, long long *drops, long long *rx_queue)
{
	char line[512], want[32];
	int ret = -ENOENT;
	FILE *f = fopen("/proc/net/udp", "r");

	if (!f)
		return -errno;
	snprintf(want, sizeof(want), "0100007F:%04X", port);
	while (fgets(line, sizeof(line), f)) {
		char local[64];
		unsigned long long d, rxq;
		/* sl local rem st tx:rx tr:tm retr uid timeout inode ref ptr drops */
		if (sscanf(line, " %*s %63s %*s %*s %*x:%llx %*s %*s %*s %*s %*s %*s %*s %llu",
			   local, &rxq, &d) == 3 && !strcmp(local, want)) {
			if (drops)
				*drops = (long long)d;
			if (rx_queue)
				*rx_queue = (long long)rxq;
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

long long udp_rcvbuf_errors(void)
{
	char names[1024], values[1024];
	long long result = -ENOENT;
	FILE *f = fopen("/proc/net/snmp", "r");

	if (!f)
		return -errno;
	while (fgets(names, sizeof(names), f) && fgets(values, sizeof(values), f)) {
		if (strncmp(names, "Udp:", 4))
			continue;
		char *sn, *sv, *n = strtok_r(names, " \n", &sn), *v = strtok_r(values, " \n", &sv);
		while (n && v) {
			if (!strcmp(n, "RcvbufErrors")) {
				result = atoll(v);
				break;
			}
			n = strtok_r(NULL, " \n", &sn);
			v = strtok_r(NULL, " \n", &sv);
		}
		break;
	}
	fclose(f);
	return result;
}
