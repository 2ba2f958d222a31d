#include "engine/schedule.h"

#include <stdlib.h>
#include <string.h>

void scheduleReset(struct schedule *s) {
  s->ntasks = 0;
  s->nsteps = 0;
  s->timeoutNs = 0;
  s->proto = protoSimple;
  s->opId = 0;
  while (s->ntemps > 0) free(s->temps[--s->ntemps]);
}

void scheduleFree(struct schedule *s) {
  scheduleReset(s);
  free(s->tasks);
  free(s->steps);
  free(s->temps);
  memset(s, 0, sizeof *s);
}

void *scheduleTemp(struct schedule *s, size_t bytes) {
  if (s->ntemps == s->tempCap) {
    int cap = s->tempCap ? 2 * s->tempCap : 4;
    void **t = realloc(s->temps, sizeof *t * cap);
    if (!t) return NULL;
    s->temps = t;
    s->tempCap = cap;
  }
  void *p = malloc(bytes ? bytes : 1);
  if (p) s->temps[s->ntemps++] = p;
  return p;
}

int scheduleAddTask(struct schedule *s, const struct redOp *red, int dep, struct bootstrap *boot,
                    volatile int *abortFlag, int rank, const char *what) {
  if (s->ntasks == s->taskCap) {
    int cap = s->taskCap ? 2 * s->taskCap : 16;
    struct task *t = realloc(s->tasks, sizeof *t * cap);
    if (!t) return -1;
    s->tasks = t;
    s->taskCap = cap;
  }
  struct task *t = &s->tasks[s->ntasks];
  memset(t, 0, sizeof *t);
  t->firstStep = s->nsteps;
  t->dep = dep;
  t->dep2 = -1;
  t->red = *red;
  t->boot = boot;
  t->abortFlag = abortFlag;
  t->rank = rank;
  t->what = what;
  t->opId = s->opId;
  return s->ntasks++;
}

int scheduleAddStep(struct schedule *s, int type, int flags, struct conn *recv, struct conn *send,
                    const void *src, void *dst, size_t bytes) {
  if (bytes == 0) return 0;
  if (s->nsteps == s->stepCap) {
    int cap = s->stepCap ? 2 * s->stepCap : 64;
    struct step *st = realloc(s->steps, sizeof *st * cap);
    if (!st) return -1;
    s->steps = st;
    s->stepCap = cap;
  }
  struct step *st = &s->steps[s->nsteps++];
  st->type = (uint8_t)type;
  st->flags = (uint8_t)flags;
  st->recv = recv;
  st->send = send;
  st->rp = recv ? protoFor(s->proto, recv) : NULL;
  st->sp = send ? protoFor(s->proto, send) : NULL;
  st->src = src;
  st->dst = dst;
  st->bytes = bytes;
  st->check = 0;
  s->tasks[s->ntasks - 1].nsteps++;
  return 0;
}

/* An operation's first step on each connection, in the order its tasks were
 * added (a builder chains tasks that share a connection in that order),
 * sends and checks the descriptor. */
void scheduleMarkOp(struct schedule *s, int firstTask, const struct opDesc *desc) {
  static uint64_t stamps; /* tells this build from earlier ones in conn->descStamp */
  uint64_t stamp = __atomic_add_fetch(&stamps, 1, __ATOMIC_RELAXED);
  for (int i = firstTask; i < s->ntasks; i++) {
    struct task *t = &s->tasks[i];
    t->check = 1;
    t->desc = *desc;
    for (int j = 0; j < t->nsteps; j++) {
      struct step *st = &s->steps[t->firstStep + j];
      if (st->send && st->send->descStamp != stamp) {
        st->send->descStamp = stamp;
        st->check |= CHECK_SEND_DESC;
      }
      if (st->recv && st->recv->descStamp != stamp) {
        st->recv->descStamp = stamp;
        st->check |= CHECK_RECV_DESC;
      }
    }
  }
}

void schedulePrint(const struct schedule *s, FILE *out) {
  static const char *names[stepTypeCount] = {"send",          "recv",           "copy",
                                             "copySend",      "recvCopySend",   "recvReduceSend",
                                             "recvReduceCopy", "recvReduceCopySend", "recvAcc",
                                             "localAcc"};
  for (int i = 0; i < s->ntasks; i++) {
    const struct task *t = &s->tasks[i];
    fprintf(out, "[%d] %s opCount %llx task %d (after %d): %d steps, %s\n", t->rank, t->what,
            (unsigned long long)t->opId, i, t->dep, t->nsteps, dtypeName(t->red.dtype));
    for (int j = 0; j < t->nsteps; j++) {
      const struct step *st = &s->steps[t->firstStep + j];
      fprintf(out, "[%d]   %-18s %8zu B  from %-3d to %-3d src %p dst %p%s%s\n", t->rank, names[st->type],
              st->bytes, st->recv ? st->recv->peer : -1, st->send ? st->send->peer : -1, (const void *)st->src,
              (void *)st->dst, st->flags & REDUCE_PRE ? " pre" : "", st->flags & REDUCE_POST ? " post" : "");
    }
  }
}
