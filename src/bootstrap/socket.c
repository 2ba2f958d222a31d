#define _GNU_SOURCE
#include "bootstrap/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/param.h"
#include "topo/topo.h"

static socklen_t addrLen(const union sockAddr *a) {
  return a->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

const char *sockAddrStr(const union sockAddr *a, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &a->sin6.sin6_addr, host, sizeof host);
    snprintf(buf, len, "[%s]:%d", host, ntohs(a->sin6.sin6_port));
  } else {
    inet_ntop(AF_INET, &a->sin.sin_addr, host, sizeof host);
    snprintf(buf, len, "%s:%d", host, ntohs(a->sin.sin_port));
  }
  return buf;
}

ncclResult_t sockAddrParse(const char *text, union sockAddr *out) {
  char host[256];
  const char *port;
  memset(out, 0, sizeof *out);
  if (text[0] == '[') {
    const char *end = strchr(text, ']');
    if (!end || end[1] != ':' || (size_t)(end - text - 1) >= sizeof host) goto bad;
    memcpy(host, text + 1, end - text - 1);
    host[end - text - 1] = 0;
    port = end + 2;
  } else {
    const char *colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= sizeof host) goto bad;
    memcpy(host, text, colon - text);
    host[colon - text] = 0;
    port = colon + 1;
  }
  char *endp;
  long p = strtol(port, &endp, 10);
  if (*port == 0 || *endp || p <= 0 || p > 65535) goto bad;
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int gai = getaddrinfo(host, NULL, &hints, &res);
  if (gai != 0 || res == NULL) {
    WARN("Bootstrap : cannot resolve '%s' (of '%s'): %s", host, text, gai ? gai_strerror(gai) : "no address");
    return ncclInvalidArgument;
  }
  memcpy(out, res->ai_addr, res->ai_addrlen < sizeof *out ? res->ai_addrlen : sizeof *out);
  freeaddrinfo(res);
  if (out->sa.sa_family == AF_INET6) out->sin6.sin6_port = htons((uint16_t)p);
  else out->sin.sin_port = htons((uint16_t)p);
  return ncclSuccess;
bad:
  WARN("Invalid address '%s': expected ipv4:port, [ipv6]:port or host:port", text);
  return ncclInvalidArgument;
}

/* NCCL_SOCKET_IFNAME semantics: comma list of prefixes; leading ^ excludes;
 * then a leading = makes the names exact. As in NCCL, an entry is
 * prefix[:port...] and only the prefix counts for sockets (the port names an
 * InfiniBand port), so eth0:1 means eth0; an entry with no prefix matches
 * nothing. */
static int ifnameMatches(const char *name, const char *spec, int *excludeOut) {
  int exclude = 0, exact = 0;
  if (*spec == '^') {
    exclude = 1;
    spec++;
  }
  if (*spec == '=') {
    exact = 1;
    spec++;
  }
  *excludeOut = exclude;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    tok[strcspn(tok, ":")] = '\0';
    if (!tok[0]) continue;
    int hit = exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0;
    if (hit) return !exclude;
  }
  return exclude;
}

/* 1 when addr lies in the subnet of the interface address ifa/mask. */
static int sameSubnet(const struct sockaddr *ifa, const struct sockaddr *mask, const union sockAddr *addr) {
  if (!mask || ifa->sa_family != addr->sa.sa_family) return 0;
  const unsigned char *x, *y, *m;
  size_t n;
  if (ifa->sa_family == AF_INET) {
    x = (const unsigned char *)&((const struct sockaddr_in *)ifa)->sin_addr;
    m = (const unsigned char *)&((const struct sockaddr_in *)mask)->sin_addr;
    y = (const unsigned char *)&addr->sin.sin_addr;
    n = 4;
  } else {
    x = (const unsigned char *)&((const struct sockaddr_in6 *)ifa)->sin6_addr;
    m = (const unsigned char *)&((const struct sockaddr_in6 *)mask)->sin6_addr;
    y = (const unsigned char *)&addr->sin6.sin6_addr;
    n = 16;
  }
  for (size_t i = 0; i < n; i++)
    if ((x[i] & m[i]) != (y[i] & m[i])) return 0;
  return 1;
}

/* The passes of the automatic choice, in NCCL's order (no InfiniBand). */
enum { pickSpec, pickSubnet, pickPlain, pickDocker, pickLoopback, pickVirbr, pickPasses };

static int pickMatches(int pass, const struct ifaddrs *i, const char *spec, const union sockAddr *reach) {
  int excl, lo = (i->ifa_flags & IFF_LOOPBACK) || !strncmp(i->ifa_name, "lo", 2);
  int docker = !strncmp(i->ifa_name, "docker", 6), virbr = !strncmp(i->ifa_name, "virbr", 5);
  switch (pass) {
    case pickSpec: return spec[0] && ifnameMatches(i->ifa_name, spec, &excl);
    case pickSubnet: return reach && sameSubnet(i->ifa_addr, i->ifa_netmask, reach);
    case pickPlain: return !lo && !docker && !virbr;
    case pickDocker: return docker;
    case pickLoopback: return lo;
    case pickVirbr: return virbr;
  }
  return 0;
}

ncclResult_t sockPickAddr(const union sockAddr *reach, union sockAddr *out, char *ifname, size_t ifnameLen) {
  const char *spec = paramStr(paramSocketIfname);
  const char *fam = paramStr(paramSocketFamily);
  int family = strcmp(fam, "AF_INET") == 0 ? AF_INET : strcmp(fam, "AF_INET6") == 0 ? AF_INET6 : 0;
  struct ifaddrs *ifs;
  SYSCHECK(getifaddrs(&ifs), "getifaddrs");
  /* NCCL_SOCKET_IFNAME, when set, is the only pass. Of a pass's matches the
   * one nearest this thread (its NUMA node) wins, else the first. */
  int found = 0, myNuma = -2;
  for (int pass = spec[0] ? pickSpec : pickSubnet; pass < (spec[0] ? pickSpec + 1 : pickPasses) && !found; pass++) {
    struct ifaddrs *cand[16];
    int nicNuma[16], nc = 0;
    for (struct ifaddrs *i = ifs; i && nc < 16; i = i->ifa_next) {
      if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || !(i->ifa_flags & IFF_RUNNING)) continue;
      int f = i->ifa_addr->sa_family;
      if (f != AF_INET && f != AF_INET6) continue;
      if (family && f != family) continue;
      if (f == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)i->ifa_addr;
        if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) continue;
      }
      if (!pickMatches(pass, i, spec, reach)) continue;
      nicNuma[nc] = topoNicNuma(i->ifa_name);
      cand[nc++] = i;
    }
    if (nc == 0) continue;
    if (nc > 1 && myNuma == -2) myNuma = topoThreadNuma();
    struct ifaddrs *i = cand[nc > 1 ? topoNearest(nicNuma, nc, myNuma) : 0];
    int f = i->ifa_addr->sa_family;
    memset(out, 0, sizeof *out);
    memcpy(out, i->ifa_addr, f == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
    snprintf(ifname, ifnameLen, "%s", i->ifa_name);
    found = 1;
  }
  freeifaddrs(ifs);
  if (!found) {
    WARN("Bootstrap : no socket interface found%s%s%s%s", spec[0] ? " matching NCCL_SOCKET_IFNAME=" : "", spec,
         family ? " with NCCL_SOCKET_FAMILY=" : "", family ? fam : "");
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

static ncclResult_t setNonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  SYSCHECK(flags, "fcntl");
  SYSCHECK(fcntl(fd, F_SETFL, flags | O_NONBLOCK), "fcntl");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return ncclSuccess;
}

ncclResult_t sockListen(union sockAddr *addr, int *fd) {
  int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  SYSCHECK(s, "socket");
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = addrLen(addr);
  if (bind(s, &addr->sa, len) < 0 || listen(s, 1024) < 0 || getsockname(s, &addr->sa, &len) < 0) {
    char buf[80];
    WARN("Bootstrap : cannot listen on %s: %s", sockAddrStr(addr, buf, sizeof buf), strerror(errno));
    close(s);
    return ncclSystemError;
  }
  ncclResult_t res = setNonblocking(s);
  if (res != ncclSuccess) {
    close(s);
    return res;
  }
  *fd = s;
  return ncclSuccess;
}

/* One attempt, nonblocking, so that an address nothing answers for (no ARP
 * reply, a black hole) waits no longer than the one wait allows: 0 with the
 * connected socket in *fd, else the attempt's errno (or -1 with *res set
 * when the wait gave up, or no socket could be made). */
static int connectOnce(const union sockAddr *addr, int *fd, struct waitState *w, ncclResult_t *res) {
  int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    WARN("Call to socket failed: %s", strerror(errno));
    *res = ncclSystemError;
    return -1;
  }
  int err = connect(s, &addr->sa, addrLen(addr)) == 0 ? 0 : errno;
  while (err == EINPROGRESS) {
    struct pollfd p = {s, POLLOUT, 0};
    /* Not asleep while the wait still spins (its first rounds are meant to
     * be quick: the stall's clock starts after them). */
    int ready = poll(&p, 1, waitSpinning(w) ? 0 : 100);
    if (ready > 0) {
      socklen_t len = sizeof err;
      if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    } else if (ready < 0 && errno != EINTR) {
      err = errno;
    } else if ((*res = waitPause(w)) != ncclSuccess) {
      close(s);
      return -1;
    }
  }
  if (err == 0 && (*res = setNonblocking(s)) == ncclSuccess) {
    *fd = s;
    return 0;
  }
  close(s);
  return err ? err : EIO;
}

/* How long a listener known to be up may stay unreachable (no route, no
 * ARP reply) before the connect gives up: routes do not come back by
 * themselves, and its peers should learn why before their timeout. */
#define SOCK_UNREACHABLE_NS 5000000000ull

ncclResult_t sockConnect(const union sockAddr *addr, int *fd, struct waitState *w, int refusedIsFinal) {
  uint64_t unreachableSince = 0;
  for (;;) {
    ncclResult_t waited = ncclSuccess;
    int err = connectOnce(addr, fd, w, &waited);
    if (err == 0) return ncclSuccess;
    if (err < 0) { /* the wait gave up during an attempt nothing answered (or no socket) */
      errno = waited == ncclTimeout ? ETIMEDOUT : 0;
      return waited;
    }
    if (err == ECONNREFUSED && refusedIsFinal) {
      errno = err;
      return ncclRemoteError;
    }
    if ((err == EHOSTUNREACH || err == ENETUNREACH) && refusedIsFinal) {
      uint64_t now = clockNs();
      if (!unreachableSince) unreachableSince = now;
      if (now - unreachableSince > SOCK_UNREACHABLE_NS) {
        errno = err;
        return ncclRemoteError;
      }
    }
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH && err != ENETUNREACH &&
        err != EINTR && err != EAGAIN) {
      char buf[80];
      WARN("Bootstrap : connect to %s failed: %s", sockAddrStr(addr, buf, sizeof buf), strerror(err));
      return ncclRemoteError;
    }
    /* The listener is not up yet: retry, backing off through the one wait
     * (which, when it gives up, leaves errno at the last attempt's error). */
    for (int i = 0; i < 64; i++) {
      ncclResult_t res = waitPause(w);
      if (res != ncclSuccess) {
        errno = res == ncclTimeout ? err : 0; /* else the wait's own reason (abort, a gone peer), said */
        return res;
      }
    }
  }
}

int sockIsLoopback(const union sockAddr *addr) {
  if (addr->sa.sa_family == AF_INET) return (ntohl(addr->sin.sin_addr.s_addr) >> 24) == 127;
  return addr->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&addr->sin6.sin6_addr);
}

int sockRefused(const union sockAddr *addr, int waitMs) {
  int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return 0;
  int refused = 0;
  if (connect(s, &addr->sa, addrLen(addr)) != 0) {
    if (errno == ECONNREFUSED) {
      refused = 1;
    } else if (errno == EINPROGRESS) {
      struct pollfd p = {s, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      if (poll(&p, 1, waitMs) == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
        refused = err == ECONNREFUSED;
    }
  }
  close(s);
  return refused;
}

ncclResult_t sockTryAccept(int listenFd, int *fd) {
  int s = accept4(listenFd, NULL, NULL, SOCK_CLOEXEC);
  if (s < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      *fd = -1;
      return ncclSuccess;
    }
    WARN("Call to accept failed: %s", strerror(errno));
    return ncclSystemError;
  }
  ncclResult_t res = setNonblocking(s);
  if (res != ncclSuccess) {
    close(s);
    return res;
  }
  *fd = s;
  return ncclSuccess;
}

ncclResult_t sockSendAll(int fd, const void *buf, size_t len, struct waitState *w) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      waitProgress(w);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      CHECK(waitPause(w));
    } else {
      WARN("Bootstrap : send failed: %s", strerror(errno));
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

ncclResult_t sockRecvAll(int fd, void *buf, size_t len, struct waitState *w) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      waitProgress(w);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      CHECK(waitPause(w));
    } else {
      INFO(subsysBootstrap, "Bootstrap : connection closed by remote peer (%s)", n == 0 ? "EOF" : strerror(errno));
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}
