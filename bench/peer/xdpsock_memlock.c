// SPDX-License-Identifier: MIT OR Apache-2.0
//
// Linked beside bpf-examples' xdpsock (built with -Dsetrlimit=xskit_peer_setrlimit): its
// setrlimit(RLIMIT_MEMLOCK, infinity) is fatal where root may not raise the limit, although
// since Linux 5.11 UMEMs and BPF maps are charged to the memory cgroup and need none.
#include <errno.h>
#include <sys/resource.h>

int xskit_peer_setrlimit(int resource, const struct rlimit *limit)
{
	if (setrlimit(resource, limit) == 0)
		return 0;
	return resource == RLIMIT_MEMLOCK && errno == EPERM ? 0 : -1;
}
