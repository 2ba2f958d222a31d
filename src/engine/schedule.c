#include "engine/schedule.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <string.h>

/* Staging memory between runs: a pool of buffers that keeps up to
 * POOL_KEEP_BYTES, none larger than POOL_KEEP_ONE (a larger one's page
 * faults cost little next to moving it). */
#define POOL_KEEP_BYTES (64u << 20)
#define POOL_KEEP_ONE (16u << 20)
#define POOL_MAX 32
static pthread_mutex_t poolLock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *mem;
  size_t bytes;
} pool[POOL_MAX];
static int poolCount;
static size_t poolBytes;

/* New staging memory. One larger than the pool keeps is faulted in anew
 * on every call that needs it, so it asks for transparent huge pages: a
 * fault per 2 MiB instead of per 4 KiB (in-place AlltoAll of 64 MiB, 2
 * ranks: 50 ms with 4 KiB faults, against 7 ms out of place). */
#define POOL_HUGE (2u << 20)
static void *poolFresh(size_t bytes) {
  if (bytes <= POOL_KEEP_ONE) return malloc(bytes);
  size_t rounded = (bytes + POOL_HUGE - 1) & ~(size_t)(POOL_HUGE - 1);
  void *mem = aligned_alloc(POOL_HUGE, rounded);
  if (mem) madvise(mem, rounded, MADV_HUGEPAGE);
  return mem;
}

/* A buffer of at least bytes; *got says how large it is. */
static void *poolGet(size_t bytes, size_t *got) {
  pthread_mutex_lock(&poolLock);
  int best = -1;
  for (int i = 0; i < poolCount; i++)
    if (pool[i].bytes >= bytes && (best < 0 || pool[i].bytes < pool[best].bytes)) best = i;
  void *mem = NULL;
  *got = bytes;
  if (best >= 0) {
    mem = pool[best].mem;
    *got = pool[best].bytes;
    poolBytes -= pool[best].bytes;
    pool[best] = pool[--poolCount];
  }
  pthread_mutex_unlock(&poolLock);
  return mem ? mem : poolFresh(bytes);
}

static void poolPut(void *mem, size_t bytes) {
  if (!mem) return;
  pthread_mutex_lock(&poolLock);
  if (bytes <= POOL_KEEP_ONE && poolCount < POOL_MAX && poolBytes + bytes <= POOL_KEEP_BYTES) {
    pool[poolCount].mem = mem;
    pool[poolCount++].bytes = bytes;
    poolBytes += bytes;
    mem = NULL;
  }
  pthread_mutex_unlock(&poolLock);
  free(mem);
}

/* The reserved range builders get their staging addresses in: it maps no
 * memory (PROT_NONE, no swap reserved), so no real buffer of a step can
 * lie in it. Each schedule hands out its own addresses from its start.
 * The range still counts against an address-space limit (ulimit -v), so
 * under one there is none; then, and for what does not fit the range,
 * staging buffers are memory at once. */
#define TEMP_RANGE_BYTES (4ull << 30)
static char *tempRange;
static void tempRangeReserve(void) {
  struct rlimit as;
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) return;
  void *p = mmap(NULL, TEMP_RANGE_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  tempRange = p == MAP_FAILED ? NULL : p;
}

void scheduleReset(struct schedule *s) {
  s->ntasks = 0;
  s->nsteps = 0;
  s->timeoutNs = 0;
  s->proto = protoSimple;
  s->opId = 0;
  for (int i = 0; i < s->ntemps; i++) poolPut(s->temps[i].mem, s->temps[i].memBytes);
  s->ntemps = 0;
  s->tempSpan = 0;
  s->tempDirect = 0;
  s->tempsBound = 0;
}

void scheduleFree(struct schedule *s) {
  scheduleReset(s);
  free(s->tasks);
  free(s->steps);
  free(s->temps);
  free(s->profs);
  free(s->kchs);
  free(s->connRoom);
  memset(s, 0, sizeof *s);
}

int scheduleProfiled(struct schedule *s) {
  if (s->ntasks > 0 && s->tasks[0].prof) return 0; /* done for this build */
  if (s->profCap < s->ntasks) {
    struct profTask *p = realloc(s->profs, sizeof *p * (size_t)s->ntasks);
    if (!p) return -1;
    s->profs = p;
    struct profKernelCh *k = realloc(s->kchs, sizeof *k * (size_t)s->ntasks);
    if (!k) return -1;
    s->kchs = k;
    s->profCap = s->ntasks;
  }
  memset(s->profs, 0, sizeof *s->profs * (size_t)s->ntasks);
  s->nkchs = 0;
  for (int i = 0; i < s->ntasks; i++) s->tasks[i].prof = &s->profs[i];
  return 0;
}

struct profKernelCh *scheduleKernelCh(struct schedule *s) {
  struct profKernelCh *k = &s->kchs[s->nkchs++]; /* never more than the tasks */
  memset(k, 0, sizeof *k);
  return k;
}

/* The first arrays are small: most operations are a task or two of a few
 * steps, and every operation queued on a stream holds a schedule of its
 * own, whose first use of fresh memory costs a page fault per 4 KiB (with
 * room for 16 tasks and 64 steps, 7 KiB each, a timing loop's first 20
 * calls on a stream took 3 us each more than the next 20, 1 rank, 8 bytes;
 * with these, 0.5-1 us). Larger schedules double as they grow. */
#define SCHEDULE_FIRST_TASKS 2
#define SCHEDULE_FIRST_STEPS 8

/* The array arr of *cap elements of elem bytes with room for more (first
 * at the start, then twice as many), or NULL (arr and *cap as they were). */
static void *scheduleGrow(void *arr, int *cap, int first, size_t elem) {
  int want = *cap ? 2 * *cap : first;
  void *p = realloc(arr, elem * (size_t)want);
  if (p) *cap = want;
  return p;
}

struct conn **scheduleConnRoom(struct schedule *s) {
  while (!s->connRoom || s->connRoomCap < 2 * s->nsteps) { /* some room even for no steps: NULL is failure */
    struct conn **c = scheduleGrow(s->connRoom, &s->connRoomCap, 2 * s->nsteps + 2, sizeof *c);
    if (!c) return NULL;
    s->connRoom = c;
  }
  return s->connRoom;
}

void *scheduleTemp(struct schedule *s, size_t bytes) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, tempRangeReserve);
  if (bytes == 0) bytes = 1;
  size_t span = (bytes + 4095) & ~(size_t)4095;
  int direct = !tempRange || s->tempSpan + span > TEMP_RANGE_BYTES;
  if (s->ntemps == s->tempCap) {
    struct scheduleTemp *t = scheduleGrow(s->temps, &s->tempCap, 4, sizeof *t);
    if (!t) return NULL;
    s->temps = t;
  }
  struct scheduleTemp *t = &s->temps[s->ntemps];
  t->bytes = bytes;
  t->memBytes = 0;
  t->mem = direct ? poolGet(bytes, &t->memBytes) : NULL;
  if (direct && !t->mem) return NULL;
  t->at = direct ? t->mem : tempRange + s->tempSpan;
  if (!direct) s->tempSpan += span;
  s->tempDirect |= direct;
  s->ntemps++;
  return t->at;
}

/* The bound address of p when it lies in a staging buffer of s. */
static char *tempRebase(const struct schedule *s, const char *p) {
  if (!tempRange || !p || p < tempRange || p >= tempRange + s->tempSpan) return (char *)p;
  if (s->tempDirect) { /* buffers outside the range among them: look through all */
    for (int i = 0; i < s->ntemps; i++) {
      const struct scheduleTemp *t = &s->temps[i];
      if (t->at >= tempRange && t->at < tempRange + TEMP_RANGE_BYTES && p >= t->at && p < t->at + t->bytes)
        return (char *)t->mem + (p - t->at);
    }
    return (char *)p;
  }
  int lo = 0, hi = s->ntemps - 1; /* the buffers lie in the range in order */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (s->temps[mid].at <= p) lo = mid;
    else hi = mid - 1;
  }
  return (char *)s->temps[lo].mem + (p - s->temps[lo].at);
}

int scheduleTempsKept(const struct schedule *s) {
  size_t total = 0;
  for (int i = 0; i < s->ntemps; i++) total += s->temps[i].bytes;
  return total <= POOL_KEEP_ONE;
}

ncclResult_t scheduleBindTemps(struct schedule *s) {
  if (s->ntemps == 0 || s->tempsBound) return ncclSuccess; /* none, or bound by an earlier run */
  for (int i = 0; i < s->ntemps; i++)
    if (!s->temps[i].mem && !(s->temps[i].mem = poolGet(s->temps[i].bytes, &s->temps[i].memBytes))) return ncclSystemError;
  for (int i = 0; i < s->nsteps; i++) {
    s->steps[i].src = tempRebase(s, s->steps[i].src);
    s->steps[i].dst = tempRebase(s, s->steps[i].dst);
  }
  s->tempsBound = 1;
  return ncclSuccess;
}

int scheduleReserve(struct schedule *s) {
  struct task *t = s->taskCap ? s->tasks : scheduleGrow(NULL, &s->taskCap, SCHEDULE_FIRST_TASKS, sizeof *t);
  if (!t) return -1;
  s->tasks = t;
  struct step *st = s->stepCap ? s->steps : scheduleGrow(NULL, &s->stepCap, SCHEDULE_FIRST_STEPS, sizeof *st);
  if (!st) return -1;
  s->steps = st;
  memset(s->tasks, 0, sizeof *s->tasks * (size_t)s->taskCap); /* touched now, not by the first build */
  memset(s->steps, 0, sizeof *s->steps * (size_t)s->stepCap);
  return 0;
}

int scheduleAddTask(struct schedule *s, const struct redOp *red, int dep, struct bootstrap *boot,
                    volatile int *abortFlag, int rank, const char *what) {
  if (s->ntasks == s->taskCap) {
    struct task *t = scheduleGrow(s->tasks, &s->taskCap, SCHEDULE_FIRST_TASKS, sizeof *t);
    if (!t) return -1;
    s->tasks = t;
  }
  struct task *t = &s->tasks[s->ntasks];
  memset(t, 0, sizeof *t);
  t->firstStep = s->nsteps;
  t->dep = dep;
  t->dep2 = -1;
  t->red = *red;
  t->boot = boot;
  t->abortFlag = abortFlag;
  t->rank = rank;
  t->what = what;
  t->opId = s->opId;
  return s->ntasks++;
}

int scheduleAddStep(struct schedule *s, int type, int flags, struct conn *recv, struct conn *send,
                    const void *src, void *dst, size_t bytes) {
  if (bytes == 0) return 0;
  if (s->nsteps == s->stepCap) {
    struct step *st = scheduleGrow(s->steps, &s->stepCap, SCHEDULE_FIRST_STEPS, sizeof *st);
    if (!st) return -1;
    s->steps = st;
  }
  struct step *st = &s->steps[s->nsteps++];
  st->type = (uint8_t)type;
  st->flags = (uint8_t)flags;
  st->recv = recv;
  st->send = send;
  st->rp = recv ? protoFor(s->proto, recv) : NULL;
  st->sp = send ? protoFor(s->proto, send) : NULL;
  st->src = src;
  st->dst = dst;
  st->bytes = bytes;
  st->check = 0;
  s->tasks[s->ntasks - 1].nsteps++;
  return 0;
}

void scheduleHoldRefs(struct schedule *s) {
  for (int i = 0; i < s->ntasks; i++) {
    const struct task *t = &s->tasks[i];
    int deps[2] = {t->dep, t->dep2};
    for (int k = 0; k < 2; k++)
      if (deps[k] >= 0 && s->tasks[deps[k]].sendRefs && s->tasks[deps[k]].opId != t->opId)
        s->tasks[deps[k]].refsBeforeDone = 1;
  }
}

/* An operation's first step on each connection, in the order its tasks were
 * added (a builder chains tasks that share a connection in that order),
 * sends and checks the descriptor. */
void scheduleMarkOp(struct schedule *s, int firstTask, const struct opDesc *desc) {
  static uint64_t stamps; /* tells this build from earlier ones in conn->descStamp */
  uint64_t stamp = __atomic_add_fetch(&stamps, 1, __ATOMIC_RELAXED);
  for (int i = firstTask; i < s->ntasks; i++) {
    struct task *t = &s->tasks[i];
    t->check = 1;
    t->desc = *desc;
    for (int j = 0; j < t->nsteps; j++) {
      struct step *st = &s->steps[t->firstStep + j];
      if (st->send && st->send->descStamp != stamp) {
        st->send->descStamp = stamp;
        st->check |= CHECK_SEND_DESC;
      }
      if (st->recv && st->recv->descStamp != stamp) {
        st->recv->descStamp = stamp;
        st->check |= CHECK_RECV_DESC;
      }
    }
  }
}

void schedulePrint(const struct schedule *s, FILE *out) {
  static const char *names[stepTypeCount] = {"send",          "recv",           "copy",
                                             "copySend",      "recvCopySend",   "recvReduceSend",
                                             "recvReduceCopy", "recvReduceCopySend", "recvAcc",
                                             "localAcc"};
  for (int i = 0; i < s->ntasks; i++) {
    const struct task *t = &s->tasks[i];
    fprintf(out, "[%d] %s opCount %llx task %d (after %d): %d steps, %s\n", t->rank, t->what,
            (unsigned long long)t->opId, i, t->dep, t->nsteps, dtypeName(t->red.dtype));
    for (int j = 0; j < t->nsteps; j++) {
      const struct step *st = &s->steps[t->firstStep + j];
      fprintf(out, "[%d]   %-18s %8zu B  from %-3d to %-3d src %p dst %p%s%s\n", t->rank, names[st->type],
              st->bytes, st->recv ? st->recv->peer : -1, st->send ? st->send->peer : -1, (const void *)st->src,
              (void *)st->dst, st->flags & REDUCE_PRE ? " pre" : "", st->flags & REDUCE_POST ? " post" : "");
    }
  }
}
