/* Does MSG_ZEROCOPY pay on a link? One TCP stream, the same buffer sent
 * over and over in chunks, with plain send() and with MSG_ZEROCOPY (whose
 * completions are read from the error queue before the buffer is sent
 * again); prints the rate, the sender's CPU use, and how many completions
 * the kernel marked SO_EE_CODE_ZEROCOPY_COPIED (it copied after all, as it
 * does whenever the receiver is on the same machine: loopback, veth).
 *   zerocopy server PORT
 *   zerocopy client ADDR PORT MIB CHUNK_KIB ROUNDS */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

static double wallSeconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpuSeconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/* Completions read so far, and those the kernel says it copied. */
static long completed, copied;

/* Reads the completions waiting on fd's error queue; with wait, first
 * waits for one. */
static void readCompletions(int fd, int wait) {
  for (;;) {
    char control[256];
    struct msghdr m = {.msg_control = control, .msg_controllen = sizeof control};
    if (recvmsg(fd, &m, MSG_ERRQUEUE | (wait ? 0 : MSG_DONTWAIT)) < 0) {
      if (!wait || errno != EAGAIN) return;
      struct pollfd p = {fd, 0, 0}; /* POLLERR is always reported */
      poll(&p, 1, 10);
      continue;
    }
    wait = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      struct sock_extended_err *e = (struct sock_extended_err *)CMSG_DATA(c);
      if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      long n = (long)(e->ee_data - e->ee_info) + 1; /* a range of send calls */
      completed += n;
      if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED) copied += n;
    }
  }
}

static int server(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 2)) {
    perror("zerocopy server");
    return 1;
  }
  size_t cap = 4 << 20;
  char *buf = malloc(cap);
  for (int k = 0; k < 2; k++) { /* one connection per mode */
    int c = accept(s, NULL, NULL);
    while (recv(c, buf, cap, 0) > 0) {
    }
    close(c);
  }
  return 0;
}

static int client(const char *addr, int port, size_t bytes, size_t chunk, int rounds) {
  char *buf = aligned_alloc(4096, bytes);
  memset(buf, 1, bytes);
  for (int zc = 0; zc < 2; zc++) {
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a) || (zc && setsockopt(s, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one))) {
      perror("zerocopy client");
      return 1;
    }
    long calls = 0;
    completed = copied = 0;
    for (int r = 0; r < rounds; r++) {
      double t0 = wallSeconds(), c0 = cpuSeconds();
      for (size_t off = 0; off < bytes;) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        ssize_t w = send(s, buf + off, n, zc ? MSG_ZEROCOPY : 0);
        if (w < 0 && (errno == ENOBUFS || errno == EAGAIN)) { /* too many pages pinned: let some go */
          readCompletions(s, 1);
          continue;
        }
        if (w < 0) {
          perror("send");
          return 1;
        }
        off += (size_t)w;
        calls++;
        if (zc) readCompletions(s, 0);
      }
      while (zc && completed < calls) readCompletions(s, 1); /* the buffer is ours again */
      double t = wallSeconds() - t0;
      printf("%-12s %8.2f GB/s %6.0f%% cpu  copied by the kernel: %ld of %ld sends\n",
             zc ? "MSG_ZEROCOPY" : "send", bytes / t / 1e9, (cpuSeconds() - c0) / t * 100, copied, zc ? calls : 0);
    }
    close(s);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "server")) return server(atoi(argv[2]));
  if (argc == 7 && !strcmp(argv[1], "client"))
    return client(argv[2], atoi(argv[3]), (size_t)atol(argv[4]) << 20, (size_t)atol(argv[5]) << 10, atoi(argv[6]));
  fprintf(stderr, "usage: zerocopy server PORT | zerocopy client ADDR PORT MIB CHUNK_KIB ROUNDS\n");
  return 2;
}
