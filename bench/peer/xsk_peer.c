// SPDX-License-Identifier: MIT OR Apache-2.0
//
// xsk_peer: the measuring stick for xskit's ring path. A minimal AF_XDP program on libxdp's
// xsk.h with the loop shapes of the kernel's xdpsock sample (the AF_XDP posting's
// benchmark): rxdrop, txpush and l2fwd, batches of 64, peek/release and reserve/submit on
// the rings, frames reused straight from the completion ring. bench/callgrind.sh runs it
// beside `xskit bench` under callgrind and prints the ratio of their instructions per
// packet.
//
//   xsk_peer rxdrop|txpush|l2fwd IFACE PACKETS [DST_MAC [MAX_EMPTY]]
//
// Binds queue 0 in native (DRV) mode, copy, with need_wakeup; stops after PACKETS packets
// (received for rxdrop and l2fwd, completed for txpush), or after MAX_EMPTY polls of an
// empty rx ring, and prints {"packets": N, "empty_polls": E}.
// libxdp loads its default redirect program, which is detached at the end.

#include <errno.h>
#include <linux/if_link.h>
#include <net/ethernet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <stdarg.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

#define NUM_FRAMES 4096
#define FRAME_SIZE XSK_UMEM__DEFAULT_FRAME_SIZE
#define RING_SIZE 2048
#define BATCH 64
#define TX_LEN 64

struct peer {
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	struct xsk_ring_prod fq;
	struct xsk_ring_cons cq;
	struct xsk_ring_cons rx;
	struct xsk_ring_prod tx;
	void *buffer;
	uint32_t outstanding_tx;
	uint64_t packets;
	// Polls that found the rx ring empty, and how many end the run (an idle run).
	uint64_t empty_polls;
	uint64_t max_empty;
};

static void die(const char *what, int err)
{
	fprintf(stderr, "xsk_peer: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static void kick_tx(struct peer *p)
{
	int ret = sendto(xsk_socket__fd(p->xsk), NULL, 0, MSG_DONTWAIT, NULL, 0);
	if (ret >= 0 || errno == ENOBUFS || errno == EAGAIN || errno == EBUSY ||
	    errno == ENETDOWN)
		return;
	die("sendto", errno);
}

static void wake_fill(struct peer *p)
{
	if (xsk_ring_prod__needs_wakeup(&p->fq))
		recvfrom(xsk_socket__fd(p->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
}

static void open_peer(struct peer *p, const char *ifname)
{
	struct xsk_umem_config ucfg = {
		.fill_size = RING_SIZE * 2,
		.comp_size = RING_SIZE,
		.frame_size = FRAME_SIZE,
		.frame_headroom = 0,
	};
	struct xsk_socket_config scfg = {
		.rx_size = RING_SIZE,
		.tx_size = RING_SIZE,
		.xdp_flags = XDP_FLAGS_DRV_MODE,
		.bind_flags = XDP_COPY | XDP_USE_NEED_WAKEUP,
	};
	size_t len = (size_t)NUM_FRAMES * FRAME_SIZE;
	int ret;

	p->buffer = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p->buffer == MAP_FAILED)
		die("mmap", errno);
	ret = xsk_umem__create(&p->umem, p->buffer, len, &p->fq, &p->cq, &ucfg);
	if (ret)
		die("xsk_umem__create", ret);
	// The kernel frees a closed socket's hold on the queue after a delay: a run that
	// follows another at once may find it still busy for a moment.
	for (int tries = 0; tries < 100; tries++) {
		ret = xsk_socket__create(&p->xsk, ifname, 0, p->umem, &p->rx, &p->tx, &scfg);
		if (ret != -EBUSY)
			break;
		usleep(10000);
	}
	if (ret)
		die("xsk_socket__create", ret);
}

static void populate_fill_ring(struct peer *p)
{
	uint32_t idx, i;

	if (xsk_ring_prod__reserve(&p->fq, RING_SIZE * 2, &idx) != RING_SIZE * 2)
		die("populating the fill ring", ENOSPC);
	for (i = 0; i < RING_SIZE * 2; i++)
		*xsk_ring_prod__fill_addr(&p->fq, idx++) = (uint64_t)i * FRAME_SIZE;
	xsk_ring_prod__submit(&p->fq, RING_SIZE * 2);
}

static void __attribute__((noinline)) peer_rxdrop(struct peer *p, uint64_t count)
{
	while (p->packets < count && p->empty_polls < p->max_empty) {
		uint32_t idx_rx = 0, idx_fq = 0, rcvd, i;
		int ret;

		rcvd = xsk_ring_cons__peek(&p->rx, BATCH, &idx_rx);
		if (!rcvd) {
			p->empty_polls++;
			wake_fill(p);
			continue;
		}
		ret = xsk_ring_prod__reserve(&p->fq, rcvd, &idx_fq);
		while (ret != (int)rcvd) {
			wake_fill(p);
			ret = xsk_ring_prod__reserve(&p->fq, rcvd, &idx_fq);
		}
		for (i = 0; i < rcvd; i++) {
			uint64_t addr = xsk_ring_cons__rx_desc(&p->rx, idx_rx++)->addr;

			*xsk_ring_prod__fill_addr(&p->fq, idx_fq++) = xsk_umem__extract_addr(addr);
		}
		xsk_ring_prod__submit(&p->fq, rcvd);
		xsk_ring_cons__release(&p->rx, rcvd);
		p->packets += rcvd;
	}
}

static void complete_tx_only(struct peer *p)
{
	uint32_t idx, rcvd;

	if (!p->outstanding_tx)
		return;
	if (xsk_ring_prod__needs_wakeup(&p->tx))
		kick_tx(p);
	rcvd = xsk_ring_cons__peek(&p->cq, BATCH, &idx);
	if (rcvd) {
		xsk_ring_cons__release(&p->cq, rcvd);
		p->outstanding_tx -= rcvd;
		p->packets += rcvd;
	}
}

// A UDP/IPv4 frame from 198.51.100.1 to 198.51.100.2, written into every frame once.
static void write_frames(struct peer *p, const uint8_t dst[6])
{
	uint8_t f[TX_LEN] = {0};
	uint32_t sum = 0, i;

	memcpy(f, dst, 6);
	memcpy(f + 6, (uint8_t[]){2, 0, 0, 0, 0, 1}, 6);
	f[12] = 0x08;
	memcpy(f + 14, (uint8_t[]){0x45, 0, 0, TX_LEN - 14, 0, 0, 0x40, 0, 64, 17, 0, 0,
				  198, 51, 100, 1, 198, 51, 100, 2}, 20);
	for (i = 14; i < 34; i += 2)
		sum += (uint32_t)f[i] << 8 | f[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	f[24] = (uint8_t)(~sum >> 8);
	f[25] = (uint8_t)~sum;
	memcpy(f + 34, (uint8_t[]){0x13, 0x88, 0x13, 0x89, 0, TX_LEN - 34, 0, 0}, 8);
	for (i = 0; i < NUM_FRAMES; i++)
		memcpy((uint8_t *)p->buffer + (size_t)i * FRAME_SIZE, f, TX_LEN);
}

static void __attribute__((noinline)) peer_txpush(struct peer *p, uint64_t count)
{
	uint32_t frame_nb = 0;

	while (p->packets < count) {
		uint32_t idx, i;

		while (xsk_ring_prod__reserve(&p->tx, BATCH, &idx) < BATCH)
			complete_tx_only(p);
		for (i = 0; i < BATCH; i++) {
			struct xdp_desc *d = xsk_ring_prod__tx_desc(&p->tx, idx + i);

			d->addr = (uint64_t)(frame_nb + i) * FRAME_SIZE;
			d->len = TX_LEN;
		}
		xsk_ring_prod__submit(&p->tx, BATCH);
		p->outstanding_tx += BATCH;
		frame_nb = (frame_nb + BATCH) % NUM_FRAMES;
		complete_tx_only(p);
	}
}

static void complete_tx_l2fwd(struct peer *p)
{
	uint32_t idx_cq = 0, idx_fq = 0, ndescs, rcvd, i;
	int ret;

	if (!p->outstanding_tx)
		return;
	if (xsk_ring_prod__needs_wakeup(&p->tx))
		kick_tx(p);
	ndescs = p->outstanding_tx > BATCH ? BATCH : p->outstanding_tx;
	rcvd = xsk_ring_cons__peek(&p->cq, ndescs, &idx_cq);
	if (!rcvd)
		return;
	ret = xsk_ring_prod__reserve(&p->fq, rcvd, &idx_fq);
	while (ret != (int)rcvd) {
		wake_fill(p);
		ret = xsk_ring_prod__reserve(&p->fq, rcvd, &idx_fq);
	}
	for (i = 0; i < rcvd; i++)
		*xsk_ring_prod__fill_addr(&p->fq, idx_fq++) =
			*xsk_ring_cons__comp_addr(&p->cq, idx_cq++);
	xsk_ring_prod__submit(&p->fq, rcvd);
	xsk_ring_cons__release(&p->cq, rcvd);
	p->outstanding_tx -= rcvd;
}

static void swap_macs(uint8_t *pkt)
{
	uint8_t tmp[6];

	memcpy(tmp, pkt, 6);
	memcpy(pkt, pkt + 6, 6);
	memcpy(pkt + 6, tmp, 6);
}

static void __attribute__((noinline)) peer_l2fwd(struct peer *p, uint64_t count)
{
	while (p->packets < count && p->empty_polls < p->max_empty) {
		uint32_t idx_rx = 0, idx_tx = 0, rcvd, i;
		int ret;

		complete_tx_l2fwd(p);
		rcvd = xsk_ring_cons__peek(&p->rx, BATCH, &idx_rx);
		if (!rcvd) {
			p->empty_polls++;
			wake_fill(p);
			continue;
		}
		ret = xsk_ring_prod__reserve(&p->tx, rcvd, &idx_tx);
		while (ret != (int)rcvd) {
			complete_tx_l2fwd(p);
			if (xsk_ring_prod__needs_wakeup(&p->tx))
				kick_tx(p);
			ret = xsk_ring_prod__reserve(&p->tx, rcvd, &idx_tx);
		}
		for (i = 0; i < rcvd; i++) {
			const struct xdp_desc *in = xsk_ring_cons__rx_desc(&p->rx, idx_rx++);
			struct xdp_desc *out = xsk_ring_prod__tx_desc(&p->tx, idx_tx++);
			uint64_t orig = xsk_umem__extract_addr(in->addr);
			uint64_t addr = xsk_umem__add_offset_to_addr(in->addr);

			swap_macs(xsk_umem__get_data(p->buffer, addr));
			out->addr = orig;
			out->len = in->len;
		}
		xsk_ring_prod__submit(&p->tx, rcvd);
		xsk_ring_cons__release(&p->rx, rcvd);
		p->packets += rcvd;
		p->outstanding_tx += rcvd;
	}
}

// Warnings only: libbpf's and libxdp's notes on sections they skip are noise here.
static int print_warnings(enum libbpf_print_level level, const char *fmt, va_list args)
{
	return level == LIBBPF_WARN ? vfprintf(stderr, fmt, args) : 0;
}

static int print_libxdp_warnings(enum libxdp_print_level level, const char *fmt, va_list args)
{
	return level == LIBXDP_WARN ? vfprintf(stderr, fmt, args) : 0;
}

static int parse_mac(const char *s, uint8_t mac[6])
{
	unsigned int b[6];

	if (sscanf(s, "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6)
		return -1;
	for (int i = 0; i < 6; i++) {
		if (b[i] > 0xff)
			return -1;
		mac[i] = (uint8_t)b[i];
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct peer p;
	uint8_t dst[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	char *end;
	uint64_t count;

	if (argc < 4 || argc > 6) {
		fprintf(stderr, "usage: xsk_peer rxdrop|txpush|l2fwd IFACE PACKETS [DST_MAC [MAX_EMPTY]]\n");
		return 2;
	}
	p.max_empty = UINT64_MAX;
	if (argc == 6) {
		p.max_empty = strtoull(argv[5], &end, 10);
		if (*end || !p.max_empty) {
			fprintf(stderr, "xsk_peer: MAX_EMPTY must be a positive number, not %s\n",
				argv[5]);
			return 2;
		}
	}
	count = strtoull(argv[3], &end, 10);
	if (*end || !count) {
		fprintf(stderr, "xsk_peer: PACKETS must be a positive number, not %s\n", argv[3]);
		return 2;
	}
	if (argc == 5 && parse_mac(argv[4], dst)) {
		fprintf(stderr, "xsk_peer: %s is not a MAC address like 02:00:00:00:00:01\n",
			argv[4]);
		return 2;
	}
	// This kernel may refuse the dispatcher's freplace programs: load the redirect program
	// alone, as libxdp would after trying.
	setenv("LIBXDP_SKIP_DISPATCHER", "1", 0);
	libbpf_set_print(print_warnings);
	libxdp_set_print(print_libxdp_warnings);
	open_peer(&p, argv[2]);
	if (!strcmp(argv[1], "rxdrop")) {
		populate_fill_ring(&p);
		peer_rxdrop(&p, count);
	} else if (!strcmp(argv[1], "txpush")) {
		write_frames(&p, dst);
		peer_txpush(&p, count);
	} else if (!strcmp(argv[1], "l2fwd")) {
		populate_fill_ring(&p);
		peer_l2fwd(&p, count);
	} else {
		fprintf(stderr, "xsk_peer: %s is not rxdrop, txpush or l2fwd\n", argv[1]);
		return 2;
	}
	printf("{\"packets\": %llu, \"empty_polls\": %llu}\n", (unsigned long long)p.packets,
	       (unsigned long long)p.empty_polls);
	xsk_socket__delete(p.xsk);
	xsk_umem__delete(p.umem);
	// Without a bpffs libxdp cannot tell that the program is its own, and leaves it: detach.
	bpf_xdp_detach((int)if_nametoindex(argv[2]), XDP_FLAGS_DRV_MODE, NULL);
	return 0;
}
