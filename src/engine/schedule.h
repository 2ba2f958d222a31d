/* Schedules are data (DESIGN.md invariant 1): an operation becomes tasks,
 * one per lane (channel or point-to-point direction), each a list of
 * primitive steps over connections. The engine runs them; the printer
 * (CHORUS_DUMP_SCHEDULE) reads the same structures. */
#ifndef CHORUS_ENGINE_SCHEDULE_H
#define CHORUS_ENGINE_SCHEDULE_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bootstrap/bootstrap.h"
#include "engine/desc.h"
#include "trace/profile.h"
#include "proto/proto.h"
#include "reduce/reduce.h"
#include "transport/conn.h"

/* "slot" is the incoming FIFO slot, "send" the outgoing one, src the rank's
 * own input, dst its output. OP is the reduction; flags (REDUCE_PRE/POST)
 * apply to the operand marked g(). */
enum stepType {
  stepSend,               /* send <- g(src); dst (or NULL): where the receiver's final result of it lands here,
                           * which a receiver that maps this rank's memory may write itself (proto.h) */
  stepRecv,               /* dst <- g(slot); no dst: the slot is only read (a token) */
  stepCopy,               /* dst <- g(src) */
  stepCopySend,           /* dst <- src; send <- src */
  stepRecvCopySend,       /* dst <- slot; send <- slot */
  stepRecvReduceSend,     /* send <- slot OP g(src) */
  stepRecvReduceCopy,     /* dst <- slot OP g(src) */
  stepRecvReduceCopySend, /* dst <- slot OP g(src); send <- dst */
  stepRecvAcc,            /* dst <- dst OP g(slot) */
  stepLocalAcc,           /* dst <- dst OP g(src) */
  stepTypeCount
};

struct step {
  uint8_t type;
  uint8_t flags;
  uint8_t check; /* CHECK_SEND_DESC / CHECK_RECV_DESC (desc.h) */
  struct conn *recv, *send;
  const struct proto *rp, *sp; /* the protocol on each: s->proto's where the connection allows it */
  const char *src;
  char *dst;
  size_t bytes;
};

enum taskRefs { refsNone, refsMapped, refsAny };

struct task {
  int firstStep, nsteps; /* into the schedule's step pool */
  int dep;               /* task that must finish first (same lane), or -1 */
  int dep2;              /* a second such task (e.g. a staging copy), or -1 */
  int cur;               /* progress: current step and bytes done in it */
  size_t off;
  int done;
  struct redOp red;
  struct bootstrap *boot; /* liveness of the peers */
  volatile int *abortFlag;
  int rank;
  const char *what; /* operation name, for messages */
  uint64_t opId;      /* the operation it belongs to (its communicator's opCount), for tracing */
  int check;          /* compare descriptors (CHORUS_CHECK) */
  struct opDesc desc; /* this rank's call */
  int channel;        /* its channel (collective lanes), or the point-to-point lane's number */
  int lane;           /* its lane (algo.h: the channels, then each peer's send and receive lanes), for the timeline */
  int streamOut;      /* the operation is large: plain copies into its output go past the cache (copyStreaming) */
  /* Its sends read memory the operation does not write again: they may
   * refer to the data instead of copying it (single copy, proto.h), where
   * the receiver maps that memory (refsMapped), or also where it can read
   * it through the kernel (refsAny: the operation is large enough). */
  int sendRefs; /* enum taskRefs */
  int refsPosted; /* during a run: some send did */
  uint64_t departMoved; /* during a run: 1 + the bytes its stalled connection had moved when its peer was seen gone */
  int refsBeforeDone; /* it is done only once they are released (scheduleHoldRefs) */
  struct profTask *prof; /* profiler and timeline events (scheduleProfiled; NULL: none) */
};

struct scheduleTemp {
  char *at;        /* the address the builder got */
  size_t bytes;    /* what the builder asked for */
  void *mem;       /* bound to this during a run (NULL: not yet) */
  size_t memBytes; /* mem's size (a pooled buffer may be larger) */
};

struct schedule {
  struct task *tasks;
  int ntasks, taskCap;
  struct step *steps;
  int nsteps, stepCap;
  /* Staging buffers. A builder gets an address in a reserved range that
   * maps nothing (schedules queued on a stream would otherwise each hold
   * fresh memory, faulted in page by page on every call); the run binds
   * each to memory from a pool and rewrites the steps' addresses
   * (scheduleBindTemps), and the next reset returns it. */
  struct scheduleTemp *temps;
  int ntemps, tempCap;
  size_t tempSpan; /* bytes of the reserved range handed out */
  int tempDirect;  /* some are memory at once (the range is full or missing) */
  int tempsBound;  /* a run has bound them (a schedule run again keeps them) */
  uint64_t timeoutNs; /* the shortest timeout of its communicators (0: CHORUS_TIMEOUT) */
  struct profTask *profs; /* each task's, when a run is profiled or traced (scheduleProfiled) */
  struct profKernelCh *kchs; /* KernelCh events, at most one per task (scheduleKernelCh) */
  int profCap, nkchs;
  struct conn **connRoom; /* scheduleConnRoom's */
  int connRoomCap;
  /* The operation being built: what the tasks and steps added next carry. */
  int proto;     /* its protocol (enum protoId), on each connection that allows it (protoFor) */
  uint64_t opId; /* its operation id */
};

void scheduleReset(struct schedule *s);
/* Gives an empty schedule its first arrays now, touched, so that a build
 * made later (a stream's queued call) finds them in memory; 0, or -1 when
 * out of memory. */
int scheduleReserve(struct schedule *s);
void scheduleFree(struct schedule *s);
/* Room for a list of the connections the steps name (two per step at
 * most), kept with the schedule for its next runs; NULL when out of
 * memory. */
struct conn **scheduleConnRoom(struct schedule *s);
/* Returns the new task's index, or -1 when out of memory. */
int scheduleAddTask(struct schedule *s, const struct redOp *red, int dep, struct bootstrap *boot,
                    volatile int *abortFlag, int rank, const char *what);
/* Appends a step to the last task added; zero-byte steps are dropped (both
 * sides of a connection drop the same ones). Returns 0 or -1 (memory). */
int scheduleAddStep(struct schedule *s, int type, int flags, struct conn *recv, struct conn *send,
                    const void *src, void *dst, size_t bytes);
/* Turns on mismatch detection for the tasks from firstTask on (one
 * operation's): each carries desc, and each connection's first step in
 * them sends or expects it. */
void scheduleMarkOp(struct schedule *s, int firstTask, const struct opDesc *desc);
/* After the build: a task whose sends may be references (sendRefs) and on
 * which a task of another operation waits ends only once its references
 * are released, since that operation may write what they point to (within
 * one operation tasks write disjoint memory, and the run ends only once
 * every reference is released). */
void scheduleHoldRefs(struct schedule *s);
void schedulePrint(const struct schedule *s, FILE *out);
/* Gives every task of the schedule its (zeroed) profiler state, kept out
 * of struct task so that runs nobody profiles do not carry it; after the
 * build, before the run. 0, or -1 when out of memory. */
int scheduleProfiled(struct schedule *s);
/* A fresh KernelCh slot of the profiled schedule (scheduleProfiled first). */
struct profKernelCh *scheduleKernelCh(struct schedule *s);
/* A staging buffer that lives as long as the schedule's current content:
 * an address for the builder's steps, backed by memory once the run binds
 * it. Builders never touch it themselves. */
void *scheduleTemp(struct schedule *s, size_t bytes);
/* Backs the staging buffers with memory (reused from earlier runs) and
 * points the steps at it; the engine calls it before a run.
 * ncclSystemError when out of memory. */
ncclResult_t scheduleBindTemps(struct schedule *s);
/* 1 when the schedule's staging memory is no more than the pool would
 * keep: a schedule run again as it is (launch.c, the NULL stream's) may
 * then hold it bound between runs (the steps point at it; a second bind
 * changes nothing) instead of building anew. */
int scheduleTempsKept(const struct schedule *s);

#endif
