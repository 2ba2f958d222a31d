/* The flight recorder: each communicator keeps its last CHORUS_FLIGHT_RECORDER
 * operations (number, call, algorithm, state, when queued, started and
 * ended), and dumps them when one of its operations fails (a timeout, a
 * dead peer, a mismatch) or the process gets SIGUSR1: to the log (WARN
 * level, without changing what ncclGetLastError says) and, with
 * CHORUS_FLIGHT_RECORDER_FILE, to a file per rank. The dumps of all ranks
 * answer "what was every rank doing when it hung". */
#ifndef CHORUS_TRACE_FLIGHT_H
#define CHORUS_TRACE_FLIGHT_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/observe.h"
#include "engine/desc.h"
#include "nccl.h"

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
  /* Whose record it is, for the dump's lines. */
  int rank, nranks;
  uint64_t commHash, createdNs; /* createdNs: when the communicator's init began (the entries' times count from it) */
};

/* 1 while any communicator records: launches read no clock otherwise. */
extern int flightCommsOn;
static inline int flightActive(void) { return OBSERVED(__atomic_load_n(&flightCommsOn, __ATOMIC_RELAXED) != 0); }

/* At a communicator's creation (CHORUS_FLIGHT_RECORDER entries; 0: off)
 * and its destroy. */
void flightInit(struct flightRecorder *f, int rank, int nranks, uint64_t commHash, uint64_t createdNs);
void flightFree(struct flightRecorder *f);

/* Callers look at flightActive() first: with no recorder on, these are not
 * called. now: when it happened (clockNs, or the coarse clock when nothing
 * needs finer). */
/* An operation (the call d, run as algo/proto on nch channels; running: it
 * starts at once, else it waits in a stream's queue) is recorded; its id
 * (0: f is off) names it in the calls below. */
uint64_t flightQueued(struct flightRecorder *f, const struct opDesc *d, int algo, int proto, int nch, int running,
                      uint64_t now);
void flightRunning(struct flightRecorder *f, uint64_t id, uint64_t now);
/* It ended with res (skipped: not run, an earlier failure on its stream).
 * 1 when this is f's first failure: the caller dumps the record, once per
 * communicator of its launch (flightFailureDump). */
int flightEnded(struct flightRecorder *f, uint64_t id, ncclResult_t res, int skipped, uint64_t now);
void flightFailureDump(struct flightRecorder *f, ncclResult_t res);

/* Writes f to the log and, with CHORUS_FLIGHT_RECORDER_FILE, to its rank's
 * file; why says what prompted it. */
void flightDump(struct flightRecorder *f, const char *why);

#endif
