#define _GNU_SOURCE
#include "trace/timeline.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/log.h"
#include "core/param.h"
#include "core/pathfmt.h"

/* Lanes with a track of their own (the channels, then each peer's send and
 * receive lanes: algo.h); the rest share the last. */
#define TRACE_MAX_LANES 256

struct traceFile {
  FILE *f;
  int refs;
  int pidRank;      /* the track: the rank of the first communicator traced */
  int64_t offsetNs; /* that communicator's offset to its rank 0 */
  pthread_mutex_t lock;
  int lanesNamed[TRACE_MAX_LANES + 1];
};

static pthread_mutex_t fileLock = PTHREAD_MUTEX_INITIALIZER;
static struct traceFile *theFile;
int traceOpen; /* the file is open (traceActive) */

int traceWanted(void) { return paramStr(paramTrace)[0] != 0; }

void traceCommOpen(struct traceComm *t, int rank, int nranks, uint64_t commHash, int64_t offsetNs, uint64_t errorNs) {
  memset(t, 0, sizeof *t);
  if (!traceWanted()) return;
  pthread_mutex_lock(&fileLock);
  if (!theFile) {
    static int written; /* a later communicator adds to this process's file, not over it */
    char path[4096];
    pathExpand(paramStr(paramTrace), rank, path, sizeof path);
    FILE *f = fopen(path, written ? "ae" : "we");
    written = 1;
    struct traceFile *tf = f ? calloc(1, sizeof *tf) : NULL;
    if (!tf) {
      WARN("CHORUS_TRACE: cannot write %s: %s", path, f ? "out of memory" : strerror(errno));
      if (f) fclose(f);
      pthread_mutex_unlock(&fileLock);
      return;
    }
    tf->f = f;
    tf->pidRank = rank;
    tf->offsetNs = offsetNs;
    pthread_mutex_init(&tf->lock, NULL);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    fprintf(f, "[\n");
    fprintf(f,
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d (host %s, pid %d)\"}},\n",
            rank, rank, host, (int)getpid());
    fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n", rank,
            rank);
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"operations\"}},\n", rank);
    INFO(subsysProfile, "CHORUS_TRACE: writing %s (rank %d, clock offset to rank 0 %lld ns, error %llu ns)", path, rank,
         (long long)offsetNs, (unsigned long long)errorNs);
    theFile = tf;
    __atomic_store_n(&traceOpen, 1, __ATOMIC_RELAXED);
    observeBegin();
  }
  theFile->refs++;
  struct traceFile *tf = theFile;
  pthread_mutex_unlock(&fileLock);
  pthread_mutex_lock(&tf->lock);
  fprintf(tf->f,
          "{\"name\":\"chorus_clock\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"comm\":\"0x%llx\",\"rank\":%d,"
          "\"nranks\":%d,\"offset_ns\":%lld,\"error_ns\":%llu}},\n",
          tf->pidRank, (unsigned long long)commHash, rank, nranks, (long long)offsetNs, (unsigned long long)errorNs);
  fflush(tf->f);
  pthread_mutex_unlock(&tf->lock);
  t->file = tf;
  const char *lvl = paramStr(paramTraceLevel);
  t->level = strcasecmp(lvl, "steps") == 0 ? 2 : 1;
  t->rank = rank;
  t->commHash = commHash;
}

void traceCommClose(struct traceComm *t) {
  if (!t->file) return;
  pthread_mutex_lock(&fileLock);
  struct traceFile *tf = t->file;
  t->file = NULL;
  if (--tf->refs == 0) {
    /* The array format needs no closing bracket; a last empty-named
     * metadata event keeps the file valid JSON once it is added. */
    fprintf(tf->f, "{\"name\":\"chorus_end\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{}}\n]\n", tf->pidRank);
    fclose(tf->f);
    pthread_mutex_destroy(&tf->lock);
    free(tf);
    theFile = NULL;
    __atomic_store_n(&traceOpen, 0, __ATOMIC_RELAXED);
    observeEnd();
  }
  pthread_mutex_unlock(&fileLock);
}

/* Microseconds of rank 0's clock. */
static double usOf(const struct traceFile *tf, uint64_t ns) { return (double)((int64_t)ns + tf->offsetNs) / 1e3; }

void traceOp(const struct traceComm *t, const struct traceOpInfo *op, uint64_t startNs, uint64_t endNs) {
  struct traceFile *tf = t->file;
  if (!tf) return;
  char extra[160] = "";
  if (op->op) snprintf(extra, sizeof extra, ",\"op\":\"%s\"", op->op);
  if (op->root >= 0)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",\"%s\":%d", op->p2p ? "peer" : "root", op->root);
  if (!op->p2p)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",\"algo\":\"%s\",\"proto\":\"%s\",\"channels\":%d",
             op->algo, op->proto, op->nch);
  pthread_mutex_lock(&tf->lock);
  fprintf(tf->f,
          "{\"name\":\"%s #%u\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,\"args\":{"
          "\"comm\":\"0x%llx\",\"rank\":%d,\"op_name\":\"%s\",\"seq\":%u,\"count\":%llu,\"bytes\":%llu,\"datatype\":\"%s\"%s,"
          "\"result\":\"%s\"}},\n",
          op->name, op->seq, tf->pidRank, usOf(tf, startNs), (double)(endNs - startNs) / 1e3,
          (unsigned long long)t->commHash, t->rank, op->name, op->seq, (unsigned long long)op->count,
          (unsigned long long)op->bytes, op->dtype, extra, op->result);
  pthread_mutex_unlock(&tf->lock);
}

void traceStep(const struct traceComm *t, uint32_t seq, const char *opName, int lane, const char *kind, int peer,
               uint64_t bytes, uint64_t startNs, uint64_t endNs, uint64_t waitNs) {
  struct traceFile *tf = t->file;
  if (!tf) return;
  int tid = 1 + (lane < TRACE_MAX_LANES ? lane : TRACE_MAX_LANES); /* the rest share the last track */
  pthread_mutex_lock(&tf->lock);
  if (!tf->lanesNamed[tid - 1]) {
    tf->lanesNamed[tid - 1] = 1;
    fprintf(tf->f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"lane %d\"}},\n",
            tf->pidRank, tid, lane);
  }
  fprintf(tf->f,
          "{\"name\":\"%s\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{"
          "\"comm\":\"0x%llx\",\"op_name\":\"%s\",\"seq\":%u,\"peer\":%d,\"bytes\":%llu,\"wait_us\":%.3f}},\n",
          kind, tf->pidRank, tid, usOf(tf, startNs), (double)(endNs - startNs) / 1e3, (unsigned long long)t->commHash,
          opName, seq, peer, (unsigned long long)bytes, (double)waitNs / 1e3);
  pthread_mutex_unlock(&tf->lock);
}
