/* SPDX-License-Identifier: GPL-2.0
 *
 * Copyright(c) 2019 - 2022 Intel Corporation.
 */

#ifndef XDPSOCK_H_
#define XDPSOCK_H_

#define MAX_SOCKS 4

#define SOCKET_NAME "sock_cal_bpf_fd"
#define MAX_NUM_OF_CLIENTS 10

#define CLOSE_CONN  1

typedef __u64 u64;
typedef __u32 u32;

#endif /* XDPSOCK_H */
