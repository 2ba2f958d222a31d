/* Events (chorusEventCreate and friends in chorus.h): a point in a
 * stream's order, as a CUDA event is. Recording costs no queue item: the
 * event keeps the stream and how many items had been issued. */
#include <stdlib.h>

#include "chorus.h"
#include "core/err.h"
#include "core/log.h"
#include "engine/stream.h"

#define EVENT_MAGIC 0x6576656e74212121ull

struct chorusEvent_st {
  uint64_t magic;
  cudaStream_t stream; /* NULL: never recorded, or recorded on the NULL stream (always complete) */
  uint64_t pos;
};

static ncclResult_t checkEvent(chorusEvent_t e, const char *call) {
  if (e == NULL || e->magic != EVENT_MAGIC) {
    WARN("%s : event %p was not created by chorusEventCreate (or was destroyed)", call, (void *)e);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t chorusEventCreate(chorusEvent_t *event) {
  if (event == NULL) {
    WARN("chorusEventCreate : event argument is NULL");
    return ncclInvalidArgument;
  }
  chorusEvent_t e = calloc(1, sizeof *e);
  if (!e) return ncclSystemError;
  e->magic = EVENT_MAGIC;
  *event = e;
  return ncclSuccess;
}

ncclResult_t chorusEventRecord(chorusEvent_t e, cudaStream_t stream) {
  CHECK(checkEvent(e, "chorusEventRecord"));
  stream = streamResolve(stream);
  if (stream != NULL) CHECK(streamCheck(stream, "chorusEventRecord"));
  cudaStream_t old = e->stream;
  e->pos = stream ? streamMark(stream) : 0;
  e->stream = stream;
  if (old) streamRelease(old);
  return ncclSuccess;
}

ncclResult_t chorusEventQuery(chorusEvent_t e) {
  CHECK(checkEvent(e, "chorusEventQuery"));
  if (e->stream == NULL) return ncclSuccess;
  CHECK(streamOwned(e->stream, "chorusEventQuery"));
  if (streamPassed(e->stream, e->pos)) return ncclSuccess;
  return ncclInProgress;
}

ncclResult_t chorusEventSynchronize(chorusEvent_t e) {
  CHECK(checkEvent(e, "chorusEventSynchronize"));
  if (e->stream == NULL) return ncclSuccess;
  return streamWaitFor(e->stream, e->pos, "chorusEventSynchronize");
}

ncclResult_t chorusEventDestroy(chorusEvent_t e) {
  CHECK(checkEvent(e, "chorusEventDestroy"));
  if (e->stream) streamRelease(e->stream);
  e->magic = 0;
  free(e);
  return ncclSuccess;
}
