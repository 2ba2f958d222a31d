#define _GNU_SOURCE
#include "bootstrap/acceptor.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/socket.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

/* A rank sends its hello right after connecting, but may not run for a
 * while in between: under valgrind, whose threads take turns, a rank's
 * init thread back from connect waited more than a second behind its
 * process's thread polling ncclCommGetAsyncError, and the root dropped its
 * connection (the rank then read "the root closed the connection without a
 * word"). A silent stranger holds a pending slot this long at most, and
 * less when the slots run out (the oldest silent one goes first). */
#define HELLO_DEADLINE_NS 10000000000ull

void acceptorInit(struct acceptor *a, int listenFd, size_t helloBytes) {
  a->listenFd = listenFd;
  a->helloBytes = helloBytes;
  a->npending = 0;
}

static void dropPending(struct acceptor *a, int i, const char *why) {
  INFO(subsysBootstrap, "Bootstrap : dropped a connection that %s", why);
  close(a->pending[i].fd);
  a->pending[i] = a->pending[--a->npending];
}

/* Reads what the pending connections sent; drops those that hung up or
 * ran out of time. 1 when one's hello is complete (*fd, hello). */
static int readPending(struct acceptor *a, int *fd, void *hello, int *progressed) {
  uint64_t now = 0;
  for (int i = 0; i < a->npending; i++) {
    struct acceptorConn *p = &a->pending[i];
    ssize_t n = recv(p->fd, p->buf + p->got, a->helloBytes - p->got, MSG_DONTWAIT);
    if (n > 0) {
      *progressed = 1;
      p->got += (size_t)n;
      if (p->got == a->helloBytes) {
        *fd = p->fd;
        memcpy(hello, p->buf, a->helloBytes);
        a->pending[i] = a->pending[--a->npending];
        return 1;
      }
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      *progressed = 1;
      dropPending(a, i--, "closed before sending its hello");
      continue;
    }
    if (!now) now = clockNs();
    if (now > p->deadlineNs) {
      *progressed = 1;
      dropPending(a, i--, "sent no complete hello in time");
    }
  }
  return 0;
}

ncclResult_t acceptorPoll(struct acceptor *a, int *fd, void *hello, int *progressed) {
  *fd = -1;
  *progressed = 0;
  for (;;) { /* accept everything that is waiting */
    if (a->npending == ACCEPTOR_MAX_PENDING) {
      /* Full (a flood of strangers): first read what the pending ones
       * sent, so that a rank whose hello has arrived is not dropped for a
       * stranger that came after it; then, if still full, drop the oldest
       * of those that sent nothing (of all, if every one sent some). */
      if (readPending(a, fd, hello, progressed)) return ncclSuccess;
      if (a->npending == ACCEPTOR_MAX_PENDING) {
        int oldest = -1;
        for (int pass = 0; pass < 2 && oldest < 0; pass++)
          for (int i = 0; i < a->npending; i++)
            if ((pass || a->pending[i].got == 0) &&
                (oldest < 0 || a->pending[i].deadlineNs < a->pending[oldest].deadlineNs))
              oldest = i;
        dropPending(a, oldest, "was the oldest of too many pending ones");
      }
    }
    int c;
    ncclResult_t res = sockTryAccept(a->listenFd, &c);
    if (res != ncclSuccess) return res;
    if (c < 0) break;
    *progressed = 1;
    a->pending[a->npending++] = (struct acceptorConn){c, 0, clockNs() + HELLO_DEADLINE_NS, {0}};
  }
  readPending(a, fd, hello, progressed);
  return ncclSuccess;
}

ncclResult_t acceptorNext(struct acceptor *a, int *fd, void *hello, struct waitState *w) {
  for (;;) {
    int progressed;
    CHECK(acceptorPoll(a, fd, hello, &progressed));
    if (*fd >= 0 || progressed) waitProgress(w);
    if (*fd >= 0) return ncclSuccess;
    if (!progressed) CHECK(waitPause(w));
  }
}

void acceptorClose(struct acceptor *a) {
  while (a->npending > 0) close(a->pending[--a->npending].fd);
}
