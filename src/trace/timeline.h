/* The built-in timeline (CHORUS_TRACE=path, %h host, %p pid, %r rank): each
 * process writes its operations, and at CHORUS_TRACE_LEVEL=steps each
 * task's steps with the time they waited for a peer, as Chrome / Perfetto
 * trace events (JSON array format, one event per line, so a file cut short
 * by a crash still opens). Times are on the clock of rank 0 of the first
 * communicator the process traced (the world, as programs make them), in
 * microseconds: each communicator measures its offset to its rank 0 at init
 * (bootstrapClockOffset) and the file says the offsets and their errors. `chorus-trace merge` makes
 * one file with a track per rank; `chorus-trace report` names stragglers
 * and where time went. */
#ifndef CHORUS_TRACE_TIMELINE_H
#define CHORUS_TRACE_TIMELINE_H
#include <stdint.h>

#include "core/observe.h"

/* What one process traces: one file, whatever its communicators. */
struct traceFile;

struct traceComm {
  struct traceFile *file; /* NULL: not tracing */
  int level;              /* 1: operations; 2: and their steps */
  int rank;
  uint64_t commHash;
};

/* 1 while this process writes a timeline: launches skip the trace's
 * work otherwise. */
extern int traceOpen;
static inline int traceActive(void) { return OBSERVED(__atomic_load_n(&traceOpen, __ATOMIC_RELAXED) != 0); }
/* 1 when this process wants a timeline (CHORUS_TRACE is set). */
int traceWanted(void);
/* After the communicator's clock offset to its rank 0 was measured: opens
 * (or joins) the process's file. */
void traceCommOpen(struct traceComm *t, int rank, int nranks, uint64_t commHash, int64_t offsetNs, uint64_t errorNs);
void traceCommClose(struct traceComm *t);

struct traceOpInfo {
  const char *name; /* "AllReduce" */
  uint32_t seq;
  uint64_t count, bytes;
  const char *dtype, *op; /* op NULL when not a reduction */
  int root;               /* root or peer; -1: none */
  int p2p;
  const char *algo, *proto;
  int nch;
  const char *result; /* "success" or the error */
};
/* An operation ran from startNs to endNs (this process's clockNs). */
void traceOp(const struct traceComm *t, const struct traceOpInfo *op, uint64_t startNs, uint64_t endNs);
/* A step of an operation's task on lane (0..: channels, then point-to-point)
 * ran from startNs to endNs, of which waitNs waiting for a peer's data or
 * room; kind: "send", "recv", "reduce", "copy". */
void traceStep(const struct traceComm *t, uint32_t seq, const char *opName, int lane, const char *kind, int peer,
               uint64_t bytes, uint64_t startNs, uint64_t endNs, uint64_t waitNs);

#endif
