/* The self transport: a rank's connections to itself (a send to self, a
 * one-rank ring) are FIFOs in its own memory, both ends on one layout.
 * The same whatever NCCL_SHM_DISABLE says, as NCCL's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/err.h"
#include "core/log.h"
#include "transport/transport.h"

struct selfState {
  char *mem;
  size_t bytes;
};

static int selfCanConnect(const struct bootstrap *b, int peer) { return peer == b->rank; }

static void selfClose(void *state) {
  struct selfState *s = state;
  if (!s) return;
  if (s->mem) munmap(s->mem, s->bytes);
  free(s);
}

static ncclResult_t selfSetup(void **state, struct bootstrap *b, struct connTable *t, size_t buffSize,
                              const unsigned char *mine) {
  int me = b->rank, lanes = t->nch + 1;
  *state = NULL;
  if (!mine[me]) return ncclSuccess;
  struct selfState *s = calloc(1, sizeof *s);
  if (!s) return ncclSystemError;
  size_t connBytes = connFifoBytes(buffSize);
  s->bytes = connBytes * (size_t)lanes;
  s->mem = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (s->mem == MAP_FAILED) {
    s->mem = NULL;
    free(s);
    WARN("Call to mmap failed: %s (%zu bytes)", strerror(errno), connBytes * (size_t)lanes);
    return ncclSystemError;
  }
  for (int l = 0; l < lanes; l++) {
    char *base = s->mem + connBytes * (size_t)l;
    connLayout(connSend(t, me, l), base, buffSize, me);
    connLayout(connRecv(t, me, l), base, buffSize, me);
    connSend(t, me, l)->tp = connRecv(t, me, l)->tp = &selfTransport;
    connPrefault(connSend(t, me, l));
  }
  *state = s;
  return ncclSuccess;
}

const struct transport selfTransport = {
    .name = "SELF/direct",
    .p2pName = "P2P/SELF",
    .canConnect = selfCanConnect,
    .setup = selfSetup,
    .close = selfClose,
};
