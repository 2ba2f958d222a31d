/* TCP helpers for the bootstrap: interface choice, listen, connect with
 * retry, and whole-buffer send/recv that wait through the one wait. */
#ifndef CHORUS_BOOTSTRAP_SOCKET_H
#define CHORUS_BOOTSTRAP_SOCKET_H
#include <stddef.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/wait.h"
#include "nccl.h"

union sockAddr {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

/* "ip:port" or "[ip6]:port". */
const char *sockAddrStr(const union sockAddr *a, char *buf, size_t len);
/* Parses NCCL_COMM_ID's forms: ipv4:port, [ipv6]:port, host:port. */
ncclResult_t sockAddrParse(const char *text, union sockAddr *out);
/* The address to listen on, as NCCL picks it: the first running interface
 * that NCCL_SOCKET_IFNAME names (prefixes; ^ excludes; = exact), else the
 * one on the subnet of reach (the bootstrap root; may be NULL), else any but
 * docker*, lo*, virbr*, then docker, then loopback, then virbr;
 * NCCL_SOCKET_FAMILY (AF_INET, AF_INET6) restricts every pass. */
ncclResult_t sockPickAddr(const union sockAddr *reach, union sockAddr *out, char *ifname, size_t ifnameLen);
/* Listens on addr (port 0: any); writes the bound address back. Nonblocking. */
ncclResult_t sockListen(union sockAddr *addr, int *fd);
/* Connects, retrying while the listener is not up yet; nonblocking fd. No
 * attempt outlasts the wait (an address nothing answers for). With
 * refusedIsFinal (the listener is known to be up) a refused connection
 * returns ncclRemoteError at once, with errno ECONNREFUSED, and one that
 * stays unreachable (EHOSTUNREACH, ENETUNREACH) for 5 s likewise, with
 * that errno; no WARN (the caller knows whom it tried). A wait that gives
 * up (ncclTimeout) leaves errno at the last attempt's error. */
ncclResult_t sockConnect(const union sockAddr *addr, int *fd, struct waitState *w, int refusedIsFinal);
/* 1 for 127.0.0.0/8 and ::1: an address only its own host (network
 * namespace) reaches. */
int sockIsLoopback(const union sockAddr *addr);
/* 1 when nothing listens at addr any more (a connection attempt is
 * refused within waitMs), 0 otherwise (it connected, or is still on its
 * way); the probe is closed either way. A peer's listener is up from before
 * it checks in to its end: refused means the peer is gone. */
int sockRefused(const union sockAddr *addr, int waitMs);
/* Accepts one connection if one is pending: *fd = -1 when none. */
ncclResult_t sockTryAccept(int listenFd, int *fd);
ncclResult_t sockSendAll(int fd, const void *buf, size_t len, struct waitState *w);
ncclResult_t sockRecvAll(int fd, void *buf, size_t len, struct waitState *w);

#endif
