/* Out-of-band messages over the bootstrap mesh, once a communicator is up.
 * A thread per communicator (the monitor) owns the reading side of every
 * mesh connection: it sleeps in poll() and
 *   - notices a peer that goes away without saying goodbye (no call needs
 *     to be running: ncclCommGetAsyncError sees it too),
 *   - answers status queries (what operation this rank completed last, and
 *     which one it waits in) even while the application thread is busy
 *     elsewhere or stuck: a timeout can name the rank at fault,
 *   - takes faults other ranks report (a mismatched operation) so that the
 *     ranks still waiting fail with the same error instead of hanging,
 *   - queues data messages for bootstrapRecv (ncclCommSplit after init),
 *   - hands one-sided writes (ncclPutSignal) to the communicator at once,
 *     whatever its own thread is doing.
 * Every message is a frame: a 16-byte header and at most OOB_MAX_PAYLOAD
 * bytes; anything else on a mesh connection marks the peer as failed. */
#ifndef CHORUS_BOOTSTRAP_OOB_H
#define CHORUS_BOOTSTRAP_OOB_H
#include <stddef.h>
#include <stdint.h>

#include "core/wait.h"
#include "nccl.h"

struct bootstrap;

#define OOB_MAX_PAYLOAD 65536
#define OOB_MAX_STATUS 256 /* bytes of one status reply */
#define OOB_MAX_FAULT 1024 /* bytes of one fault text */

/* Writes this rank's status (at most OOB_MAX_STATUS bytes) for a query. */
typedef void (*oobStatusFn)(void *arg, void *out, size_t size);

/* Applies a one-sided write peer sent (oobSendRma), on the monitor's thread. */
typedef void (*oobRmaFn)(void *arg, int peer, const void *payload, size_t size);

/* Starts the monitor on a bootstrap whose mesh is complete; arg goes to
 * both functions. */
ncclResult_t oobStart(struct bootstrap *b, oobStatusFn status, oobRmaFn rma, void *arg, size_t statusBytes);
/* Why a peer said goodbye: it will take part in nothing more. */
enum oobDeparture { oobStaying = 0, oobDestroyed = 1, oobFinalized = 2 };
/* Stops the monitor; graceful sends every peer a goodbye (destroyed) first. */
void oobStop(struct bootstrap *b, int graceful);
/* Tells every peer this rank is done with the communicator (ncclCommFinalize),
 * so that one still waiting for it fails at once; the monitor goes on. */
void oobSayGoodbye(struct bootstrap *b, enum oobDeparture why);

ncclResult_t oobSendData(struct bootstrap *b, int peer, const void *data, size_t size, struct waitState *w);
/* A one-sided write (at most OOB_MAX_PAYLOAD bytes, opaque here) that
 * peer's monitor hands to its oobRmaFn; frames to one peer arrive in order. */
ncclResult_t oobSendRma(struct bootstrap *b, int peer, const void *payload, size_t size, struct waitState *w);
/* The next data message from peer, which must be exactly size bytes. */
ncclResult_t oobRecvData(struct bootstrap *b, int peer, void *data, size_t size, struct waitState *w);
/* Without waiting, the next data message from peer: 1, copied into data,
 * when it is exactly size bytes; -1 when it has another size; 0 when none
 * has come. It stays queued until oobDropData. */
int oobPeekData(struct bootstrap *b, int peer, void *data, size_t size);
/* Drops the data message from peer that oobPeekData saw. */
void oobDropData(struct bootstrap *b, int peer);

/* 1 when peer went away without a goodbye (or broke the protocol). */
int oobPeerGone(const struct bootstrap *b, int peer);
/* Why peer said goodbye (enum oobDeparture; oobStaying: it has not). */
int oobPeerDeparted(const struct bootstrap *b, int peer);

/* Asks every live peer for its status and waits up to waitMs for the
 * answers: replies holds nranks blocks of statusBytes, answered[i] says
 * whether rank i's block is filled (this rank's own is, always). */
void oobQueryStatus(struct bootstrap *b, void *replies, char *answered, int waitMs);

/* Tells every peer about a fault (text is shown in their WARN). */
void oobBroadcastFault(struct bootstrap *b, ncclResult_t code, const char *text);
/* 1 once a peer went away or reported a fault: one load, for every call. */
int oobTrouble(const struct bootstrap *b);
/* A fault a peer reported: its code (ncclSuccess: none); text gets the
 * message and *from the rank. */
ncclResult_t oobPendingFault(struct bootstrap *b, char *text, size_t len, int *from);

#endif
