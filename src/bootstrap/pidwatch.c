#include "bootstrap/pidwatch.h"

#include "core/forkclose.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

struct pidWatch {
  struct pidWatch *next;
  pid_t pid;
  int fd, owners;
};
static struct pidWatch *pidWatches; /* under the fork-close lock */

struct pidWatchOpening {
  pid_t pid;
  int fd, err;
};

static int pidWatchExited(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

static void pidWatchOpenLocked(void *arg) {
  struct pidWatchOpening *o = arg;
  for (struct pidWatch *w = pidWatches; w; w = w->next)
    if (w->pid == o->pid && !pidWatchExited(w->fd)) {
      w->owners++;
      o->fd = w->fd;
      return;
    }
  struct pidWatch *w = malloc(sizeof *w);
  if (!w) {
    o->err = ENOMEM;
    return;
  }
#ifdef SYS_pidfd_open
  o->fd = (int)syscall(SYS_pidfd_open, o->pid, 0);
#else
  errno = ENOSYS;
#endif
  if (o->fd < 0) {
    o->err = errno;
    free(w);
    return;
  }
  *w = (struct pidWatch){pidWatches, o->pid, o->fd, 1};
  pidWatches = w;
}

int pidWatchOpen(pid_t pid) {
  struct pidWatchOpening o = {pid, -1, 0};
  forkCloseUnder(pidWatchOpenLocked, &o);
  if (o.fd < 0) errno = o.err;
  return o.fd;
}

void pidWatchReleaseLocked(int fd) {
  for (struct pidWatch **at = &pidWatches; *at; at = &(*at)->next) {
    struct pidWatch *w = *at;
    if (w->fd != fd) continue;
    if (--w->owners == 0) {
      close(w->fd);
      *at = w->next;
      free(w);
    }
    return;
  }
}
