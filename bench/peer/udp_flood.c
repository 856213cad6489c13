// SPDX-License-Identifier: MIT OR Apache-2.0
//
// udp_flood: 18-byte UDP datagrams from the kernel's own socket (sendmmsg, 64 at a time), as
// fast as one CPU sends them, until SIGINT or SIGTERM; prints how many it sent. The kernel
// leaves their checksums partial for a device that offloads them (veth does), so a
// forwarder behind it meets what a real host's traffic brings it: bench/callgrind.sh's
// fwd-csum row.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define BATCH 64

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in to = { .sin_family = AF_INET };
	static char payload[18];
	struct iovec iov = { payload, sizeof(payload) };
	struct mmsghdr msgs[BATCH];
	struct sigaction sa = { .sa_handler = on_signal };
	unsigned long long sent = 0;
	int fd, n;

	if (argc != 3 || inet_pton(AF_INET, argv[1], &to.sin_addr) != 1 || atoi(argv[2]) <= 0 ||
	    atoi(argv[2]) > 65535) {
		fprintf(stderr, "usage: udp_flood IPV4-ADDRESS PORT\n");
		return 2;
	}
	to.sin_port = htons(atoi(argv[2]));
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0) {
		perror("udp_flood");
		return 1;
	}
	memset(msgs, 0, sizeof(msgs));
	for (n = 0; n < BATCH; n++) {
		msgs[n].msg_hdr.msg_iov = &iov;
		msgs[n].msg_hdr.msg_iovlen = 1;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	while (!stop) {
		// A flood's errors (ECONNREFUSED after an ICMP error, ENOBUFS) stop nothing.
		n = sendmmsg(fd, msgs, BATCH, 0);
		if (n > 0)
			sent += n;
	}
	printf("%llu\n", sent);
	return 0;
}
