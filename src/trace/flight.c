#define _GNU_SOURCE
#include "trace/flight.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "core/pathfmt.h"

/* Communicators with a recorder, for SIGUSR1's dump. */
static pthread_mutex_t liveLock = PTHREAD_MUTEX_INITIALIZER;
static struct flightRecorder **live;
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

void flightInit(struct flightRecorder *f, int rank, int nranks, uint64_t commHash, uint64_t createdNs) {
  memset(f, 0, sizeof *f);
  f->rank = rank;
  f->nranks = nranks;
  f->commHash = commHash;
  f->createdNs = createdNs;
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
  observeBegin();
  pthread_mutex_lock(&liveLock);
  sigSetup();
  if (nlive == liveCap) {
    int ncap = liveCap ? 2 * liveCap : 16;
    struct flightRecorder **l = realloc(live, sizeof *l * (size_t)ncap);
    if (l) live = l, liveCap = ncap;
  }
  if (nlive < liveCap) live[nlive++] = f;
  pthread_mutex_unlock(&liveLock);
}

void flightFree(struct flightRecorder *f) {
  pthread_mutex_lock(&liveLock);
  for (int i = 0; i < nlive; i++)
    if (live[i] == f) live[i] = live[--nlive];
  pthread_mutex_unlock(&liveLock);
  if (f->ring) {
    __atomic_sub_fetch(&flightCommsOn, 1, __ATOMIC_RELAXED);
    observeEnd();
  }
  free(f->ring);
  f->ring = NULL;
}


/* The entry id (NULL when it was overwritten since, or never kept). */
static struct flightEntry *entryOf(struct flightRecorder *f, uint64_t id) {
  if (!f->ring || id == 0) return NULL;
  struct flightEntry *e = &f->ring[(id - 1) & f->mask];
  return __atomic_load_n(&e->id, __ATOMIC_ACQUIRE) == id ? e : NULL;
}

static uint64_t statusOf(int state, ncclResult_t res) { return (uint64_t)state | (uint64_t)(uint32_t)res << 32; }

#define ENTRY_WORDS (sizeof(struct flightEntry) / sizeof(uint64_t))

/* A new entry is written a word at a time: id 0 first, its id last, each
 * store a release, so a dump that read a word of the new entry reads a
 * changed id after it (and drops its copy). On x86 these are plain stores. */
static void wordsPut(void *at, const void *from, size_t bytes) {
  for (size_t i = 0; i < bytes / sizeof(uint64_t); i++) {
    uint64_t w;
    memcpy(&w, (const char *)from + i * sizeof w, sizeof w);
    __atomic_store_n((uint64_t *)at + i, w, __ATOMIC_RELEASE);
  }
}

/* A dump's copy of e: 1 when it is whole (the same entry throughout), 0
 * when it was empty or written meanwhile. */
static int entryRead(const struct flightEntry *e, struct flightEntry *copy) {
  uint64_t words[ENTRY_WORDS];
  const uint64_t *in = (const uint64_t *)e;
  for (size_t i = 0; i < ENTRY_WORDS; i++) words[i] = __atomic_load_n(&in[i], __ATOMIC_ACQUIRE);
  if (!words[0] || __atomic_load_n(&in[0], __ATOMIC_ACQUIRE) != words[0]) return 0;
  memcpy(copy, words, sizeof words);
  return 1;
}

uint64_t flightQueued(struct flightRecorder *f, const struct opDesc *d, int algo, int proto, int nch, int running,
                      uint64_t now) {
  if (!f->ring) return 0;
  uint64_t id = __atomic_load_n(&f->next, __ATOMIC_RELAXED) + 1;
  __atomic_store_n(&f->next, id, __ATOMIC_RELEASE);
  struct flightEntry *e = &f->ring[(id - 1) & f->mask];
  __atomic_store_n(&e->id, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&e->status, statusOf(running ? flightStateRunning : flightStateQueued, ncclSuccess),
                   __ATOMIC_RELEASE);
  __atomic_store_n(&e->queuedNs, now, __ATOMIC_RELEASE);
  __atomic_store_n(&e->startedNs, now, __ATOMIC_RELEASE);
  __atomic_store_n(&e->endedNs, 0, __ATOMIC_RELEASE);
  wordsPut(&e->desc, d, sizeof e->desc);
  uint8_t plan[8] = {(uint8_t)algo, (uint8_t)proto, (uint8_t)nch};
  wordsPut(&e->algo, plan, sizeof plan);
  __atomic_store_n(&e->id, id, __ATOMIC_RELEASE);
  return id;
}

void flightRunning(struct flightRecorder *f, uint64_t id, uint64_t now) {
  struct flightEntry *e = entryOf(f, id);
  if (!e) return;
  __atomic_store_n(&e->startedNs, now, __ATOMIC_RELEASE);
  __atomic_store_n(&e->status, statusOf(flightStateRunning, ncclSuccess), __ATOMIC_RELEASE);
}

int flightEnded(struct flightRecorder *f, uint64_t id, ncclResult_t res, int skipped, uint64_t now) {
  if (!f->ring) return 0;
  struct flightEntry *e = entryOf(f, id);
  if (e) {
    /* The caller reads no clock at the end of an operation that nothing
     * times (now 0): a failure's end is read here. */
    __atomic_store_n(&e->endedNs, now ? now : res != ncclSuccess ? clockCoarseNs() : 0, __ATOMIC_RELEASE);
    int state = skipped ? flightStateSkipped : res == ncclSuccess ? flightStateDone : flightStateFailed;
    __atomic_store_n(&e->status, statusOf(state, res), __ATOMIC_RELEASE);
  }
  return res != ncclSuccess && !skipped && !__atomic_exchange_n(&f->dumped, 1, __ATOMIC_ACQ_REL);
}

void flightFailureDump(struct flightRecorder *f, ncclResult_t res) {
  char why[96];
  snprintf(why, sizeof why, "a failed operation (%s)", ncclGetErrorString(res));
  flightDump(f, why);
}

static const char *stateName(int s) {
  static const char *names[] = {"queued", "running", "done", "failed", "skipped"};
  return s >= 0 && s <= flightStateSkipped ? names[s] : "?";
}

/* One entry as a line: "#7 AllReduce #3 (count=..): Ring/Simple x2: done, queued at 1.234567 s, ran 12 us". */
static void entryLine(const struct flightRecorder *f, const struct flightEntry *e, uint64_t now, char *out, size_t len) {
  int state = (int)(uint32_t)e->status;
  ncclResult_t result = (ncclResult_t)(e->status >> 32);
  char d[160];
  descStr(&e->desc, d, sizeof d);
  int p2p = e->desc.coll == collSend || e->desc.coll == collRecv;
  /* The coarse clock (launchClock) may read up to a tick behind the fine
   * one that stamped the creation: an operation queued right after it. */
  double at = e->queuedNs > f->createdNs ? (double)(e->queuedNs - f->createdNs) / 1e9 : 0;
  int n = p2p ? snprintf(out, len, "%s: %s", d, stateName(state))
              : snprintf(out, len, "%s via %s/%s on %u channel(s): %s", d, algoName(e->algo), protoName(e->proto),
                         e->nch, stateName(state));
  if (n < 0 || (size_t)n >= len) return;
  if (state == flightStateFailed) n += snprintf(out + n, len - (size_t)n, " (%s)", ncclGetErrorString(result));
  if ((size_t)n >= len) return;
  n += snprintf(out + n, len - (size_t)n, ", queued at %.6f s", at);
  if ((size_t)n >= len) return;
  if (state == flightStateQueued)
    snprintf(out + n, len - (size_t)n, ", waiting %.6f s", (double)(now > e->queuedNs ? now - e->queuedNs : 0) / 1e9);
  else if (state == flightStateRunning)
    snprintf(out + n, len - (size_t)n, ", running for %.6f s",
             (double)(now > e->startedNs ? now - e->startedNs : 0) / 1e9);
  else if (e->startedNs && e->endedNs >= e->startedNs)
    snprintf(out + n, len - (size_t)n, ", ran %.6f s", (double)(e->endedNs - e->startedNs) / 1e9);
}

static void flightWrite(struct flightRecorder *f, const char *why);

/* Its lines show the communicator's rank, whatever thread dumps it (a
 * signal's, a watcher's). */
void flightDump(struct flightRecorder *f, const char *why) {
  int was = logGetRank();
  logSetRank(f->rank);
  flightWrite(f, why);
  logSetRank(was);
}

static void flightWrite(struct flightRecorder *f, const char *why) {
  if (!f->ring) return;
  const char *pattern = paramStr(paramFlightRecorderFile);
  FILE *out = NULL;
  if (pattern[0]) {
    char path[4096];
    pathExpand(pattern, f->rank, path, sizeof path);
    out = fopen(path, "a");
    if (!out) REPORT("Flight recorder: cannot open %s: %s", path, strerror(errno));
  }
  /* A copy first, written after: calls on the communicator go on meanwhile
   * (and do not wait for the log's I/O). */
  struct flightEntry *copy = malloc(sizeof *copy * ((size_t)f->mask + 1));
  if (!copy) {
    if (out) fclose(out);
    return;
  }
  uint64_t next = __atomic_load_n(&f->next, __ATOMIC_ACQUIRE), first = next > f->cap ? next - f->cap + 1 : 1;
  for (uint32_t k = 0; k <= f->mask; k++)
    if (!entryRead(&f->ring[k], &copy[k])) copy[k].id = 0;
  uint64_t now = clockCoarseNs();
  char head[400], host[256] = "";
  gethostname(host, sizeof host - 1); /* the bootstrap's view may not exist yet (a dump during init) */
  snprintf(head, sizeof head,
           "Flight recorder of rank %d of %d (commId 0x%llx, host %s, pid %d) on %s: the last %llu of %llu operations, "
           "oldest first",
           f->rank, f->nranks, (unsigned long long)f->commHash, host, (int)getpid(), why,
           (unsigned long long)(next - first + 1), (unsigned long long)next);
  REPORT("%s", head);
  if (out) fprintf(out, "%s\n", head);
  for (uint64_t id = first; id <= next; id++) {
    const struct flightEntry *e = &copy[(id - 1) & f->mask];
    if (e->id != id) continue;
    char line[512];
    entryLine(f, e, now, line, sizeof line);
    REPORT("  %s", line);
    if (out) fprintf(out, "  %s\n", line);
  }
  free(copy);
  if (out) fclose(out);
}
