#define _GNU_SOURCE
#include "core/wait.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"

/* Spinning is cheapest when the peer has its own core, but costs a whole
 * time slice when the peer waits for ours: spin briefly (50 rounds: with 2
 * ranks on 2 cores, 8-byte AllReduce 0.29-0.33 us, with 2 rounds 0.67),
 * and once ranks share cores (waitSharedCores) hardly at all (4 ranks on
 * 2 cores, 50 -> 2 rounds, all_reduce_perf: 1 KiB 7.0-9.6 -> 4.8-5.6 us,
 * 256 KiB 82-281 -> 62-71 us, 4 MiB even). Yielding lets a peer that
 * shares our core run; sleeping stops a long wait from burning a core. */
enum { waitSpinAlone = 50, waitSpinShared = 2, waitYieldRounds = 20000 };
static int waitSpinRounds = waitSpinAlone;
/* A wait that can sleep until what it awaits arrives (a socket's data, in
 * poll) first yields this long once ranks share cores: sleeping costs the
 * waker a wake-up of this rank, and on a virtual machine one of an idle
 * vCPU too, tens of microseconds per hop, while yielding hands the core to
 * the ranks that have work. 8 ranks on 4 network namespaces of the 2-core
 * machine, 8-byte AllReduce 140 -> 94 us, 4 KiB 128 -> 104; 4 ranks on 2,
 * 8 B 37 -> 18 us; 256 KiB-16 MiB within the runs' noise (-9% to +8%).
 * With a core each, the wait sleeps at once after spinning: yielding there
 * only delayed the next message (2 ranks, 2 namespaces, 8 B 9.1 -> 11.2). */
#define WAIT_BLOCK_YIELD_SHARED_NS 50000ull

/* A rank that spins needs a core of its own, and forked ranks can start on
 * one CPU and stay there for tens of milliseconds, even seconds: the
 * kernel's balancer does not move a task that has just run, and this VM's
 * kernel wakes a task where it slept (no cache domain over its CPUs). 2
 * ranks of a short job on the 2-core machine then took 3 us per 8-byte
 * call, each spinning out the other's time slice, against 0.3 us (a third
 * of the runs of 100 calls). So the first yield of a stall is timed: when
 * it took this long, something else ran on this CPU meanwhile (a yield
 * with nothing else to run takes about 0.2 us here), and after twice in a
 * row in one thread, that thread moves to another CPU of its affinity
 * mask: the mask without this CPU, then the mask back (all CPUs where it
 * named every CPU online: Linux keeps the last mask set as the thread's
 * own request, which a CPU set that later grows must not be held to).
 * Both ranks of a shared CPU see it, and had both moved they would share
 * the next one: each moves at such a moment with even odds. A thread
 * allowed one CPU stays. A few moves at once (init's waits take from the
 * same budget), then one per WAIT_MOVE_EVERY_NS, so that a CPU shared for
 * good (with another program) costs a move (a few us) that often. */
#define WAIT_YIELD_RAN_OTHER_NS 1500ull
#define WAIT_MOVE_EVERY_NS 100000000ull
#define WAIT_MOVE_BURST 8
static _Thread_local uint32_t waitLongYields;
static uint64_t waitMoveDueNs; /* when the budget is whole again (a token bucket kept as one time) */

static int waitMoveAllowed(uint64_t now) {
  uint64_t due = __atomic_load_n(&waitMoveDueNs, __ATOMIC_RELAXED), next;
  do {
    if (due > now + (WAIT_MOVE_BURST - 1) * WAIT_MOVE_EVERY_NS) return 0;
    next = (due > now ? due : now) + WAIT_MOVE_EVERY_NS;
  } while (!__atomic_compare_exchange_n(&waitMoveDueNs, &due, next, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return 1;
}

/* Moves this thread within its mask mine: onto the CPUs of via (the
 * kernel moves it at once when its mask leaves out the CPU it is on), then
 * the mask back, so that only where it runs changes (all CPUs where mine
 * named every CPU online: Linux keeps the last mask set as the thread's
 * own request, which a CPU set that later grows must not be held to).
 * Between the two calls another thread's change to this thread's mask
 * would be undone: none of chorus's does that. 0, or -1 where it did not
 * move. */
static int waitMoveVia(const cpu_set_t *via, const cpu_set_t *mine) {
  if (sched_setaffinity(0, sizeof *via, via) != 0) return -1;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t back = *mine;
  if (online > 0 && CPU_COUNT(mine) >= online) memset(&back, 0xff, sizeof back); /* no mask of its own */
  if (sched_setaffinity(0, sizeof back, &back) != 0 && sched_setaffinity(0, sizeof *mine, mine) != 0)
    WARN("could not restore this thread's CPU affinity after moving it: %s", strerror(errno));
  return 0;
}

/* Off the CPU this thread runs on, onto another one it may use, if the
 * budget allows. */
static void waitMoveOff(uint64_t now, uint64_t tookNs) {
  cpu_set_t mine, others;
  int cpu = sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof mine, &mine) != 0) return;
  others = mine;
  CPU_CLR(cpu, &others);
  if (CPU_COUNT(&others) == 0 || !waitMoveAllowed(now) || waitMoveVia(&others, &mine) != 0) return;
  static int told; /* the first move at INFO, the rest at TRACE */
  int first = !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED);
  CHORUS_LOG(first ? logInfo : logTrace, subsysInit,
             "chorus : a wait's yield ran another task on CPU %d (%llu ns): moved to CPU %d%s", cpu,
             (unsigned long long)tookNs, sched_getcpu(), first ? " (later moves are logged at TRACE)" : "");
}

int waitPlaceOn(int slot) {
  cpu_set_t mine, one;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (slot < 0 || online < 2 || sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) < online) return -1;
  int want = slot % CPU_COUNT(&mine), cpu = -1;
  for (int c = 0, seen = 0; c < CPU_SETSIZE && cpu < 0; c++)
    if (CPU_ISSET(c, &mine) && seen++ == want) cpu = c;
  if (cpu < 0) return -1;
  if (sched_getcpu() == cpu) return cpu;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return waitMoveVia(&one, &mine) == 0 ? sched_getcpu() : -1;
}

static void waitYieldTimed(void) {
  uint64_t before = clockNs();
  sched_yield();
  uint64_t after = clockNs();
  if (after - before < WAIT_YIELD_RAN_OTHER_NS) {
    waitLongYields = 0;
    return;
  }
  if (++waitLongYields < 2) return;
  waitLongYields = 0;
  if (((after >> 10) ^ (after >> 3)) & 1) return; /* even odds, from the clock's low bits */
  waitMoveOff(after, after - before);
}

void waitSharedCores(void) { __atomic_store_n(&waitSpinRounds, waitSpinShared, __ATOMIC_RELAXED); }

int waitCoresShared(void) { return __atomic_load_n(&waitSpinRounds, __ATOMIC_RELAXED) == waitSpinShared; }

int waitSpinning(const struct waitState *w) {
  return w->rounds < (uint32_t)__atomic_load_n(&waitSpinRounds, __ATOMIC_RELAXED);
}
#define WAIT_CHECK_INTERVAL_NS 50000000ull /* 50 ms between liveness checks */

void waitBegin(struct waitState *w, volatile int *abortFlag, waitLivenessFn liveness, void *arg,
               const char *what) {
  w->rounds = 0;
  w->stallStartNs = 0;
  w->nextCheckNs = 0;
  w->timeoutNs = waitDefaultTimeoutNs();
  w->abortFlag = abortFlag;
  w->liveness = liveness;
  w->livenessArg = arg;
  w->what = what;
  w->block = NULL;
  w->blockArg = NULL;
  w->blockNow = 0;
}

uint64_t waitDefaultTimeoutNs(void) {
  int64_t t = paramInt(paramTimeout); /* as of the latest communicator's creation */
  /* beyond what nanoseconds in 64 bits hold (584 years): none, as 0 */
  return t > 0 && (uint64_t)t <= UINT64_MAX / 1000000000ull ? (uint64_t)t * 1000000000ull : 0;
}

uint64_t waitDiagnosisNs(uint64_t timeoutNs) {
  const uint64_t most = 100000000ull, least = 10000000ull; /* the peers' monitors answer within milliseconds */
  uint64_t part = timeoutNs / 20;
  return timeoutNs == 0 || part > most ? most : part < least ? least : part;
}

ncclResult_t waitPause(struct waitState *w) {
  uint32_t r = w->rounds++;
  if (r == 0) w->stallStartNs = 0; /* a new stall */
  if (w->abortFlag && __atomic_load_n(w->abortFlag, __ATOMIC_ACQUIRE)) {
    WARN("%s: ended by ncclCommAbort or ncclCommRevoke of its communicator", w->what);
    return ncclInvalidUsage;
  }
  uint32_t spin = (uint32_t)__atomic_load_n(&waitSpinRounds, __ATOMIC_RELAXED);
  if (r < spin) {
    cpuRelax();
    return ncclSuccess;
  }
  uint64_t now = clockNs();
  if (w->stallStartNs == 0) {
    w->stallStartNs = now;
    w->nextCheckNs = now + WAIT_CHECK_INTERVAL_NS;
  }
  if (now >= w->nextCheckNs) {
    w->nextCheckNs = now + WAIT_CHECK_INTERVAL_NS;
    if (w->liveness) {
      ncclResult_t res = w->liveness(w->livenessArg);
      if (res != ncclSuccess) return res;
    }
    if (w->timeoutNs && now - w->stallStartNs > w->timeoutNs) {
      WARN("%s timed out: no progress for %.3g s", w->what, (double)(now - w->stallStartNs) / 1e9);
      return ncclTimeout;
    }
  }
  uint64_t yieldFirstNs = spin == waitSpinShared ? WAIT_BLOCK_YIELD_SHARED_NS : 0; /* shared cores: see above */
  if (w->block && w->blockNow && now - w->stallStartNs >= yieldFirstNs) {
    /* What is awaited wakes block() itself (bytes on a socket): sleep in it
     * rather than yield, which would burn a core other ranks need (after a
     * short spell of yielding where ranks share cores, see above). */
    w->block(w->blockArg, 1000000ull);
  } else if (r < spin + waitYieldRounds) {
    if (r == spin && spin == waitSpinAlone)
      waitYieldTimed();
    else
      sched_yield();
  } else {
    /* Back off from 20 us to 1 ms: long waits cost little CPU, and the abort
     * flag is still seen within a millisecond. */
    uint32_t slept = r - spin - waitYieldRounds;
    uint64_t ns = 20000ull << (slept / 64 > 5 ? 5 : slept / 64);
    if (ns > 1000000ull) ns = 1000000ull;
    if (w->block) {
      w->block(w->blockArg, ns);
    } else {
      struct timespec ts = {0, (long)ns};
      nanosleep(&ts, NULL);
    }
  }
  return ncclSuccess;
}
