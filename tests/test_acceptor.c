/* The bootstrap's acceptor under a flood, without processes or timing: a
 * rank connects and sends its hello, then more silent strangers than the
 * acceptor keeps pending connect behind it, all before the acceptor looks.
 * Its first rounds must hand out the rank's hello (read before any room is
 * made), not drop the rank as the oldest pending connection, nor when it
 * has sent only part of its hello so far; and a rank that connects once
 * the pending connections are full still gets in. */
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/acceptor.h"
#include "bootstrap/socket.h"
#include "harness.h"

#define STRANGERS (ACCEPTOR_MAX_PENDING + 44)

static int connectTo(const union sockAddr *addr) {
  int s = socket(addr->sa.sa_family, SOCK_STREAM, 0);
  socklen_t len = addr->sa.sa_family == AF_INET ? sizeof addr->sin : sizeof addr->sin6;
  if (s < 0 || connect(s, &addr->sa, len) != 0) return -1;
  return s;
}

static double secs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Polls until a hello comes out (or 2 s pass): 0 and its bytes in got. */
static int nextHello(struct acceptor *a, char *got, size_t bytes) {
  double t0 = secs();
  while (secs() - t0 < 2) {
    int fd, progressed;
    if (acceptorPoll(a, &fd, got, &progressed) != ncclSuccess) return 1;
    if (fd >= 0) {
      close(fd);
      return 0;
    }
    if (!progressed) usleep(1000);
  }
  (void)bytes;
  return 1;
}

/* An acceptor of 16-byte hellos on a fresh listener (its address and
 * descriptor in addr and listenFd); NULL when there is none. */
static struct acceptor *freshAcceptor(union sockAddr *addr, int *listenFd) {
  char ifname[64];
  if (sockPickAddr(NULL, addr, ifname, sizeof ifname) != ncclSuccess || sockListen(addr, listenFd) != ncclSuccess)
    return NULL;
  struct acceptor *a = calloc(1, sizeof *a);
  if (a) acceptorInit(a, *listenFd, 16);
  return a;
}

/* One flood on a fresh listener: the rank sends its hello before the
 * strangers come (partial: only half of it, the rest once the acceptor has
 * looked, so that its connection has sent something when room is made). */
static int flood(int partial) {
  union sockAddr addr;
  int listenFd;
  struct acceptor *a = freshAcceptor(&addr, &listenFd);
  EXPECT(a != NULL, "a listener");
  char hello[16] = "rank zero hello", got[16];
  size_t first = partial ? 8 : sizeof hello;
  int rank = connectTo(&addr), strangers[STRANGERS];
  EXPECT(rank >= 0 && write(rank, hello, first) == (ssize_t)first, "the rank's connection");
  for (int i = 0; i < STRANGERS; i++) EXPECT((strangers[i] = connectTo(&addr)) >= 0, "stranger %d", i);
  usleep(50000); /* every connection in the backlog, the hello in its buffer */
  if (partial) {
    int fd, progressed;
    NCCLCHECK(acceptorPoll(a, &fd, got, &progressed)); /* takes them all in, reads half a hello */
    EXPECT(fd < 0, "half a hello came out");
    EXPECT(write(rank, hello + first, sizeof hello - first) == (ssize_t)(sizeof hello - first), "the rest");
  }
  EXPECT(nextHello(a, got, sizeof got) == 0 && memcmp(got, hello, sizeof hello) == 0,
         "the rank's hello (%s sent before %d strangers connected) never came out", partial ? "half" : "all",
         STRANGERS);
  /* A second rank, with the pending connections full of silent strangers. */
  char late[16] = "rank one hello!";
  int second = connectTo(&addr);
  EXPECT(second >= 0 && write(second, late, sizeof late) == (ssize_t)sizeof late, "the second rank's connection");
  EXPECT(nextHello(a, got, sizeof got) == 0 && memcmp(got, late, sizeof late) == 0,
         "the second rank's hello never came out");
  acceptorClose(a);
  for (int i = 0; i < STRANGERS; i++) close(strangers[i]);
  close(rank);
  close(second);
  close(listenFd);
  free(a);
  return 0;
}

/* A rank that connects and then does not run for a while before its hello
 * (under valgrind, a thread back from connect waited over a second for its
 * turn) is still taken: the acceptor, polled all along as the root polls
 * it, kept the connection (it dropped it after 1 s, and the rank read "the
 * root closed the connection without a word"). */
static int slowHello(void) {
  union sockAddr addr;
  int listenFd;
  struct acceptor *a = freshAcceptor(&addr, &listenFd);
  EXPECT(a != NULL, "a listener");
  char hello[16] = "rank late hello", got[16];
  int rank = connectTo(&addr);
  EXPECT(rank >= 0, "the rank's connection");
  for (double t0 = secs(); secs() - t0 < 1.5;) {
    int fd, progressed;
    NCCLCHECK(acceptorPoll(a, &fd, got, &progressed));
    EXPECT(fd < 0, "a hello came out before it was sent");
    usleep(1000);
  }
  EXPECT(write(rank, hello, sizeof hello) == (ssize_t)sizeof hello, "the late hello");
  EXPECT(nextHello(a, got, sizeof got) == 0 && memcmp(got, hello, sizeof hello) == 0,
         "a hello sent 1.5 s after its connection never came out");
  acceptorClose(a);
  close(rank);
  close(listenFd);
  free(a);
  return 0;
}

int main(void) {
  int failed = flood(0) || flood(1) || slowHello();
  printf("test_acceptor: %s\n", failed ? "FAILED" : "passed");
  return failed;
}
