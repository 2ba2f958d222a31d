/* Descriptors a process forked while they are open closes in the child: a
 * child that kept its parent's connections (a DataLoader worker, a
 * multiprocessing fork after init) held them up after the parent died, and
 * the peers saw no end-of-file. The child only closes (a shutdown would end
 * the parent's connections too) and sends nothing. One lock, held across
 * every fork, guards the list: an owner unlists and closes under it
 * (forkCloseRemove), so that a child never closes a descriptor number the
 * parent has closed and reused since. */
#ifndef CHORUS_CORE_FORKCLOSE_H
#define CHORUS_CORE_FORKCLOSE_H

struct forkClose {
  struct forkClose *next;
  /* Closes the owner's descriptors, marking them closed; called under the
   * lock, in a forked child or by forkCloseRemove. */
  void (*closeFds)(struct forkClose *self);
};

/* Lists f (its closeFds set) until forkCloseRemove. */
void forkCloseAdd(struct forkClose *f);
/* Unlists f, if listed, and calls its closeFds (listed or not: an owner
 * whose setup failed before it was listed closes the same way; none set,
 * nothing). */
void forkCloseRemove(struct forkClose *f);
/* Runs fn(arg) under the lock, as closeFds runs: for an owner that closes
 * some of its descriptors before forkCloseRemove, or shares them with
 * other owners (bootstrap/pidwatch.h). */
void forkCloseUnder(void (*fn)(void *arg), void *arg);

#endif
