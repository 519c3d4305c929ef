/*
 * readfloor: the least CPU a closed-loop streaming client can spend per
 * request, for bench/loadgen.sh section 2. It holds STREAMS keep-alive
 * connections to a loopback HTTP/1.1 server, writes one POST on each,
 * reads each response until the chunked coding's last chunk ("0\r\n\r\n")
 * and writes the next request at once. Reads are one read(2) per epoll
 * readiness, on one thread: no parsing, no timestamps, no records, no
 * allocation. After WARMUP_S seconds it counts the requests completed
 * and its own CPU time (getrusage: user + sys) for DURATION_S seconds and
 * prints one JSON line.
 *
 *   readfloor PORT STREAMS WARMUP_S DURATION_S
 *
 * Build: cc -O2 -o readfloor readfloor.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char body[] = "{\"model\":\"m\",\"prompt\":[1,2,3,4],\"max_tokens\":16,\"stream\":true}";
static char request[512];
static size_t request_len;

struct stream {
	int fd;
	char tail[5]; /* the last five bytes read */
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}

static int send_request(int fd)
{
	/* a request of a few hundred bytes fits an empty socket buffer */
	ssize_t n = write(fd, request, request_len);
	if (n != (ssize_t)request_len) {
		fprintf(stderr, "readfloor: write: %s\n", n < 0 ? strerror(errno) : "short write");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: readfloor PORT STREAMS WARMUP_S DURATION_S\n");
		return 2;
	}
	int port = atoi(argv[1]), n = atoi(argv[2]);
	double warmup = atof(argv[3]), duration = atof(argv[4]);
	if (port <= 0 || n <= 0 || warmup < 0 || duration <= 0) {
		fprintf(stderr, "readfloor: bad arguments\n");
		return 2;
	}
	request_len = (size_t)snprintf(request, sizeof request,
		"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		port, strlen(body), body);

	int ep = epoll_create1(0);
	struct stream *ss = calloc((size_t)n, sizeof *ss);
	if (ep < 0 || ss == NULL) {
		perror("readfloor");
		return 1;
	}
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	for (int i = 0; i < n; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		int one = 1;
		if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
			perror("readfloor: connect");
			return 1;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		fcntl(fd, F_SETFL, O_NONBLOCK);
		ss[i].fd = fd;
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0 || send_request(fd) != 0) {
			perror("readfloor: epoll_ctl");
			return 1;
		}
	}

	double start = now_s(), counting_from = start + warmup, end = counting_from + duration, cpu0 = 0;
	long completed = 0, reads = 0;
	int counting = 0;
	static char buf[65536];
	struct epoll_event evs[256];
	for (;;) {
		double t = now_s();
		if (!counting && t >= counting_from) {
			counting = 1;
			completed = reads = 0;
			cpu0 = cpu_s();
		}
		if (counting && t >= end)
			break;
		int k = epoll_wait(ep, evs, 256, 100);
		if (k < 0 && errno != EINTR) {
			perror("readfloor: epoll_wait");
			return 1;
		}
		for (int j = 0; j < k; j++) {
			struct stream *s = &ss[evs[j].data.u32];
			ssize_t m = read(s->fd, buf, sizeof buf);
			reads++;
			if (m < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (m <= 0) {
				fprintf(stderr, "readfloor: read: %s\n", m < 0 ? strerror(errno) : "the server closed a connection");
				return 1;
			}
			if (m >= 5) {
				memcpy(s->tail, buf + m - 5, 5);
			} else {
				memmove(s->tail, s->tail + m, (size_t)(5 - m));
				memcpy(s->tail + 5 - m, buf, (size_t)m);
			}
			if (memcmp(s->tail, "0\r\n\r\n", 5) == 0) {
				completed++;
				memset(s->tail, 0, 5);
				if (send_request(s->fd) != 0)
					return 1;
			}
		}
	}
	double cpu = cpu_s() - cpu0;
	if (completed == 0) {
		fprintf(stderr, "readfloor: no request completed in %.1f s\n", duration);
		return 1;
	}
	printf("{\"streams\":%d,\"duration_s\":%.3f,\"completed\":%ld,\"completed_rps\":%.1f,\"cpu_s\":%.6f,\"cpu_us_per_request\":%.1f,\"reads_per_request\":%.2f}\n",
		n, duration, completed, completed / duration, cpu, cpu / completed * 1e6, (double)reads / completed);
	return 0;
}
