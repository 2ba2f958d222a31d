/* A spinlock for state held a few stores at a time on every call (the
 * flight recorder, the stats): uncontended it is one atomic exchange, a
 * fifth of a mutex; contended it yields the core. */
#ifndef CHORUS_CORE_SPIN_H
#define CHORUS_CORE_SPIN_H
#include <sched.h>

static inline void spinLock(int *lock) {
  while (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}
static inline void spinUnlock(int *lock) { __atomic_store_n(lock, 0, __ATOMIC_RELEASE); }

#endif
