#define _GNU_SOURCE
#include "api/flight.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/group.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "core/pathfmt.h"
#include "core/spin.h"

/* Communicators with a recorder, for SIGUSR1's dump. */
static pthread_mutex_t liveLock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm **live;
static int nlive, liveCap;

/* SIGUSR1: the handler only writes a byte to a pipe (all a signal handler
 * may safely do); a thread of ours reads it and dumps every recorder. It is
 * installed only where the program left SIGUSR1 at its default (or where
 * ours was inherited over fork). */
static int sigPipe[2] = {-1, -1};
static pid_t sigPid;  /* the process whose thread reads the pipe */
static int sigReady;  /* that thread runs (under liveLock) */

static void onSigusr1(int sig) {
  int saved = errno;
  if (sigPipe[1] >= 0 && getpid() == sigPid) {
    (void)!write(sigPipe[1], "d", 1); /* nonblocking: a full pipe has a dump coming anyway */
  } else { /* a forked child with no dump thread yet: the signal's default (it ends the process) */
    signal(sig, SIG_DFL);
    raise(sig);
  }
  errno = saved;
}

/* A child forked after: its parent's dump thread is not in it, nor are its
 * communicators; the next one it makes starts its own thread. */
static void afterForkChild(void) {
  if (sigPipe[0] >= 0) close(sigPipe[0]);
  if (sigPipe[1] >= 0) close(sigPipe[1]);
  sigPipe[0] = sigPipe[1] = -1;
  sigReady = 0;
  nlive = 0;
  pthread_mutex_init(&liveLock, NULL);
}

static void *dumpThread(void *arg) {
  (void)arg;
  char c;
  for (;;) {
    ssize_t r = read(sigPipe[0], &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return NULL;
    pthread_mutex_lock(&liveLock);
    for (int i = 0; i < nlive; i++) flightDump(live[i], "SIGUSR1");
    pthread_mutex_unlock(&liveLock);
  }
}

/* Under liveLock, once per process (and again in a forked child). */
static void sigSetup(void) {
  static int atforkDone;
  if (!atforkDone) {
    pthread_atfork(NULL, NULL, afterForkChild);
    atforkDone = 1;
  }
  if (sigReady) return;
  sigReady = 1; /* tried: not again in this process, whatever comes of it */
  struct sigaction old;
  if (sigaction(SIGUSR1, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
      (old.sa_handler != SIG_DFL && old.sa_handler != onSigusr1))
    return;
  if (pipe2(sigPipe, O_CLOEXEC) != 0) return;
  fcntl(sigPipe[1], F_SETFL, fcntl(sigPipe[1], F_GETFL) | O_NONBLOCK);
  sigPid = getpid();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  /* The thread must not take SIGUSR1 (or any signal) itself. */
  sigset_t all, prev;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &prev);
  int ok = pthread_create(&t, &attr, dumpThread, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &prev, NULL);
  pthread_attr_destroy(&attr);
  if (!ok) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = onSigusr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
}

int flightCommsOn; /* communicators recording (flightActive) */

void flightInit(struct ncclComm *comm) {
  struct flightRecorder *f = &comm->flight;
  memset(f, 0, sizeof *f);
  f->lock = 0;
  int64_t cap = paramInt(paramFlightRecorder);
  if (cap <= 0) return;
  if (cap > 1 << 20) cap = 1 << 20;
  uint32_t slots = 1; /* a power of two: a mask, not a division, on every call */
  while (slots < (uint32_t)cap) slots <<= 1;
  f->ring = calloc(slots, sizeof *f->ring);
  if (!f->ring) return;
  f->cap = (uint32_t)cap;
  f->mask = slots - 1;
  __atomic_add_fetch(&flightCommsOn, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&liveLock);
  sigSetup();
  if (nlive == liveCap) {
    int ncap = liveCap ? 2 * liveCap : 16;
    struct ncclComm **l = realloc(live, sizeof *l * (size_t)ncap);
    if (l) live = l, liveCap = ncap;
  }
  if (nlive < liveCap) live[nlive++] = comm;
  pthread_mutex_unlock(&liveLock);
}

void flightFree(struct ncclComm *comm) {
  struct flightRecorder *f = &comm->flight;
  pthread_mutex_lock(&liveLock);
  for (int i = 0; i < nlive; i++)
    if (live[i] == comm) live[i] = live[--nlive];
  pthread_mutex_unlock(&liveLock);
  if (f->ring) __atomic_sub_fetch(&flightCommsOn, 1, __ATOMIC_RELAXED);
  free(f->ring);
  f->ring = NULL;
}


/* The entry of item (NULL when it was overwritten since, or never kept). */
static struct flightEntry *entryOf(struct flightRecorder *f, uint64_t id) {
  if (!f->ring || id == 0) return NULL;
  struct flightEntry *e = &f->ring[(id - 1) & f->mask];
  return e->id == id ? e : NULL;
}

void flightQueued(struct groupItem *items, int n, uint64_t now) {
  for (int i = 0; i < n; i++) {
    struct flightRecorder *f = &items[i].comm->flight;
    if (!f->ring) continue;
    spinLock(&f->lock);
    uint64_t id = ++f->next;
    struct flightEntry *e = &f->ring[(id - 1) & f->mask];
    e->id = id;
    e->desc = items[i].desc.check;
    e->algo = (uint8_t)items[i].plan.algo;
    e->proto = (uint8_t)items[i].plan.proto;
    e->nch = (uint8_t)items[i].plan.nch;
    e->result = ncclSuccess;
    /* The caller runs the NULL stream's part at once: it is running already
     * (one lock and one clock reading less on the latency path). */
    e->state = items[i].stream == NULL ? flightStateRunning : flightStateQueued;
    e->queuedNs = e->startedNs = now;
    e->endedNs = 0;
    items[i].flightId = id;
    spinUnlock(&f->lock);
  }
}

void flightRunning(const struct groupItem *items, int n, void *stream, uint64_t now) {
  for (int i = 0; i < n; i++) {
    if (items[i].stream != stream) continue;
    struct flightRecorder *f = &items[i].comm->flight;
    if (!f->ring) continue;
    spinLock(&f->lock);
    struct flightEntry *e = entryOf(f, items[i].flightId);
    if (e) {
      e->state = flightStateRunning;
      e->startedNs = now;
    }
    spinUnlock(&f->lock);
  }
}

void flightEnded(const struct groupItem *items, int n, void *stream, ncclResult_t res, int skipped, uint64_t now) {
  for (int i = 0; i < n; i++) {
    if (items[i].stream != stream) continue;
    struct ncclComm *comm = items[i].comm;
    struct flightRecorder *f = &comm->flight;
    if (!f->ring) continue;
    spinLock(&f->lock);
    struct flightEntry *e = entryOf(f, items[i].flightId);
    if (e) {
      e->state = skipped ? flightStateSkipped : res == ncclSuccess ? flightStateDone : flightStateFailed;
      e->result = res;
      /* The caller reads no clock at the end of an operation that nothing
       * times (now 0): a failure's end is read here. */
      e->endedNs = now ? now : res != ncclSuccess ? clockCoarseNs() : 0;
    }
    int dump = res != ncclSuccess && !skipped && !f->dumped;
    if (dump) f->dumped = 1;
    spinUnlock(&f->lock);
    if (dump && groupCommLeader(items, i) == i) { /* one dump per communicator of the launch */
      char why[96];
      snprintf(why, sizeof why, "a failed operation (%s)", ncclGetErrorString(res));
      flightDump(comm, why);
    }
  }
}

static const char *stateName(int s) {
  static const char *names[] = {"queued", "running", "done", "failed", "skipped"};
  return s >= 0 && s <= flightStateSkipped ? names[s] : "?";
}

/* One entry as a line: "#7 AllReduce #3 (count=..): Ring/Simple x2: done, queued at 1.234567 s, ran 12 us". */
static void entryLine(const struct ncclComm *comm, const struct flightEntry *e, uint64_t now, char *out, size_t len) {
  char d[160];
  descStr(&e->desc, d, sizeof d);
  int p2p = e->desc.coll == collSend || e->desc.coll == collRecv;
  double at = (double)(e->queuedNs - comm->createdNs) / 1e9;
  int n = p2p ? snprintf(out, len, "%s: %s", d, stateName(e->state))
              : snprintf(out, len, "%s via %s/%s on %u channel(s): %s", d, algoName(e->algo), protoName(e->proto),
                         e->nch, stateName(e->state));
  if (n < 0 || (size_t)n >= len) return;
  if (e->state == flightStateFailed)
    n += snprintf(out + n, len - (size_t)n, " (%s)", ncclGetErrorString((ncclResult_t)e->result));
  if ((size_t)n >= len) return;
  n += snprintf(out + n, len - (size_t)n, ", queued at %.6f s", at);
  if ((size_t)n >= len) return;
  if (e->state == flightStateQueued)
    snprintf(out + n, len - (size_t)n, ", waiting %.6f s", (double)(now > e->queuedNs ? now - e->queuedNs : 0) / 1e9);
  else if (e->state == flightStateRunning)
    snprintf(out + n, len - (size_t)n, ", running for %.6f s",
             (double)(now > e->startedNs ? now - e->startedNs : 0) / 1e9);
  else if (e->startedNs && e->endedNs >= e->startedNs)
    snprintf(out + n, len - (size_t)n, ", ran %.6f s", (double)(e->endedNs - e->startedNs) / 1e9);
}

void flightDump(struct ncclComm *comm, const char *why) {
  struct flightRecorder *f = &comm->flight;
  if (!f->ring) return;
  const char *pattern = paramStr(paramFlightRecorderFile);
  FILE *out = NULL;
  if (pattern[0]) {
    char path[4096];
    pathExpand(pattern, comm->rank, path, sizeof path);
    out = fopen(path, "a");
    if (!out) REPORT("Flight recorder: cannot open %s: %s", path, strerror(errno));
  }
  /* A copy taken under the lock, written without it: calls on the
   * communicator do not wait for the log's I/O. */
  struct flightEntry *copy = malloc(sizeof *copy * ((size_t)f->mask + 1));
  if (!copy) {
    if (out) fclose(out);
    return;
  }
  spinLock(&f->lock);
  uint64_t next = f->next, first = next > f->cap ? next - f->cap + 1 : 1; /* the last cap */
  memcpy(copy, f->ring, sizeof *copy * ((size_t)f->mask + 1));
  spinUnlock(&f->lock);
  uint64_t now = clockCoarseNs();
  char head[400], host[256] = "";
  gethostname(host, sizeof host - 1); /* the bootstrap's view may not exist yet (a dump during init) */
  snprintf(head, sizeof head,
           "Flight recorder of rank %d of %d (commId 0x%llx, host %s, pid %d) on %s: the last %llu of %llu operations, "
           "oldest first",
           comm->rank, comm->nranks, (unsigned long long)comm->commHash, host, (int)getpid(), why,
           (unsigned long long)(next - first + 1), (unsigned long long)next);
  REPORT("%s", head);
  if (out) fprintf(out, "%s\n", head);
  for (uint64_t id = first; id <= next; id++) {
    const struct flightEntry *e = &copy[(id - 1) & f->mask];
    if (e->id != id) continue;
    char line[512];
    entryLine(comm, e, now, line, sizeof line);
    REPORT("  %s", line);
    if (out) fprintf(out, "  %s\n", line);
  }
  free(copy);
  if (out) fclose(out);
}
