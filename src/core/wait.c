#define _GNU_SOURCE
#include "core/wait.h"

#include <sched.h>
#include <time.h>

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
