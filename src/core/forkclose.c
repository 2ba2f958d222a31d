#include "core/forkclose.h"

#include <pthread.h>
#include <stddef.h>

static pthread_mutex_t forkCloseLock = PTHREAD_MUTEX_INITIALIZER;
static struct forkClose *forkCloseList;

static void forkPrepare(void) { pthread_mutex_lock(&forkCloseLock); }
static void forkParent(void) { pthread_mutex_unlock(&forkCloseLock); }
static void forkChild(void) {
  for (struct forkClose *f = forkCloseList; f; f = f->next) f->closeFds(f);
  forkCloseList = NULL; /* the parent's: none is this process's to close again */
  pthread_mutex_unlock(&forkCloseLock);
}
static void forkCloseAtfork(void) { pthread_atfork(forkPrepare, forkParent, forkChild); }
static pthread_once_t forkCloseOnce = PTHREAD_ONCE_INIT;

void forkCloseAdd(struct forkClose *f) {
  pthread_once(&forkCloseOnce, forkCloseAtfork);
  pthread_mutex_lock(&forkCloseLock);
  f->next = forkCloseList;
  forkCloseList = f;
  pthread_mutex_unlock(&forkCloseLock);
}

void forkCloseRemove(struct forkClose *f) {
  pthread_mutex_lock(&forkCloseLock);
  for (struct forkClose **at = &forkCloseList; *at; at = &(*at)->next)
    if (*at == f) {
      *at = f->next;
      break;
    }
  if (f->closeFds) f->closeFds(f);
  pthread_mutex_unlock(&forkCloseLock);
}

void forkCloseUnder(void (*fn)(void *arg), void *arg) {
  pthread_mutex_lock(&forkCloseLock);
  fn(arg);
  pthread_mutex_unlock(&forkCloseLock);
}
