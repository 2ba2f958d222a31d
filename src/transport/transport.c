#include "transport/transport.h"

#include <stdlib.h>

#include "core/err.h"

const struct transport *const transportTable[TRANSPORT_COUNT] = {&selfTransport, &shmTransport, &netTransport};

int transportFor(const struct bootstrap *b, int peer) {
  for (int i = 0; i < TRANSPORT_COUNT; i++)
    if (transportTable[i]->canConnect(b, peer)) return i;
  return TRANSPORT_COUNT - 1; /* the network reaches everyone */
}

ncclResult_t transportSetupAll(void **state, struct bootstrap *b, struct connTable *t, size_t buffSize) {
  unsigned char *mine = malloc((size_t)b->nranks);
  if (!mine) return ncclSystemError;
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < TRANSPORT_COUNT && res == ncclSuccess; i++) {
    for (int p = 0; p < b->nranks; p++) mine[p] = transportFor(b, p) == i;
    res = transportTable[i]->setup(&state[i], b, t, buffSize, mine);
  }
  free(mine);
  return res;
}

void transportDrainAll(void **state, struct bootstrap *b, uint64_t timeoutNs) {
  for (int i = 0; i < TRANSPORT_COUNT; i++)
    if (state[i] && transportTable[i]->drain) transportTable[i]->drain(state[i], b, timeoutNs);
}

void transportCloseAll(void **state) {
  for (int i = TRANSPORT_COUNT - 1; i >= 0; i--) {
    transportTable[i]->close(state[i]);
    state[i] = NULL;
  }
}
