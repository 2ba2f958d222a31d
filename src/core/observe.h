/* Whether the observability hooks (flight recorder, CHORUS_STATS,
 * CHORUS_TRACE, profiler plugins) are compiled in. They are, always, except
 * in bench/observe_cost's reference build (cmake -DCHORUS_NO_OBSERVE=ON),
 * which compiles every hook out so that what they cost when off can be
 * measured against a library without them. */
#ifndef CHORUS_CORE_OBSERVE_H
#define CHORUS_CORE_OBSERVE_H

#ifdef CHORUS_NO_OBSERVE
#define OBSERVED(on) 0
#else
#define OBSERVED(on) (on)
#endif

/* How many of them are on now (a recorder or stats per communicator, an
 * open trace, a loaded plugin): a launch with none looks at nothing else. */
extern int observeUsers;
static inline int observeAny(void) { return OBSERVED(__atomic_load_n(&observeUsers, __ATOMIC_RELAXED) != 0); }
static inline void observeBegin(void) { __atomic_add_fetch(&observeUsers, 1, __ATOMIC_RELAXED); }
static inline void observeEnd(void) { __atomic_sub_fetch(&observeUsers, 1, __ATOMIC_RELAXED); }

#endif
