/* The flight recorder: each communicator keeps its last CHORUS_FLIGHT_RECORDER
 * operations (number, call, algorithm, state, when queued, started and
 * ended), and dumps them when one of its operations fails (a timeout, a
 * dead peer, a mismatch) or the process gets SIGUSR1: to the log (WARN
 * level, without changing what ncclGetLastError says) and, with
 * CHORUS_FLIGHT_RECORDER_FILE, to a file per rank. The dumps of all ranks
 * answer "what was every rank doing when it hung". */
#ifndef CHORUS_API_FLIGHT_H
#define CHORUS_API_FLIGHT_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/observe.h"
#include "engine/desc.h"
#include "nccl.h"

struct groupItem;
struct ncclComm;

enum flightState { flightStateQueued, flightStateRunning, flightStateDone, flightStateFailed, flightStateSkipped };

/* One operation. The ring is written without a lock (launches pay no
 * locked instruction for it) and read by a dump on any thread, so every
 * word is stored and loaded atomically: a new entry is written with id 0
 * first and its id last, and a dump keeps a copy only when the id it read
 * before and after copying is the same (flight.c). */
struct flightEntry {
  uint64_t id;        /* 1 + its place in the communicator's history (0: empty, or being written) */
  uint64_t status;    /* enum flightState, and the ncclResult_t of a failure above bit 32 */
  uint64_t queuedNs, startedNs, endedNs;
  struct opDesc desc; /* the call, with its number */
  uint8_t algo, proto, nch, unused[5]; /* one word */
};
_Static_assert(sizeof(struct flightEntry) % sizeof(uint64_t) == 0 && sizeof(struct opDesc) % sizeof(uint64_t) == 0 &&
                   offsetof(struct flightEntry, algo) % sizeof(uint64_t) == 0,
               "entries are written and copied a word at a time");

struct flightRecorder {
  struct flightEntry *ring; /* NULL: off */
  uint32_t cap;  /* entries dumped: CHORUS_FLIGHT_RECORDER */
  uint32_t mask; /* the ring holds mask + 1 >= cap entries */
  uint64_t next; /* entries recorded so far (written by the launching thread: one at a time per communicator, as NCCL requires) */
  int dumped;    /* a failure has been dumped already */
};

/* 1 while any communicator records: launches read no clock otherwise. */
extern int flightCommsOn;
static inline int flightActive(void) { return OBSERVED(__atomic_load_n(&flightCommsOn, __ATOMIC_RELAXED) != 0); }

/* At a communicator's creation (CHORUS_FLIGHT_RECORDER entries; 0: off) and
 * its destroy. */
void flightInit(struct ncclComm *comm);
void flightFree(struct ncclComm *comm);

/* A launch's items (numbered) are queued (those on the NULL stream, which
 * the caller runs at once, start running); those on stream start running;
 * end with res (skipped: not run, an earlier failure on the stream); now:
 * when it happened (clockNs, or the coarse clock when nothing needs finer). A failure dumps the communicator's record
 * once. */
/* Callers look at flightActive() first: with no recorder on, these are not called. */
void flightQueued(struct groupItem *items, int n, uint64_t now);
void flightRunning(const struct groupItem *items, int n, void *stream, uint64_t now);
void flightEnded(const struct groupItem *items, int n, void *stream, ncclResult_t res, int skipped, uint64_t now);

/* Writes comm's record to the log and, with CHORUS_FLIGHT_RECORDER_FILE, to
 * its file; why says what prompted it. */
void flightDump(struct ncclComm *comm, const char *why);

#endif
