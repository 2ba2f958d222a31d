/* The pidfds that watch local peers' processes (bootstrap.h, pidFd), one
 * per peer process for all of this process's communicators: a torch
 * process group is two communicators, and a program makes dozens of
 * groups, each of which had a pidfd per local peer of its own (4 ranks: 6
 * of a group's 28 descriptors, under RLIMIT_NOFILE's 1024). Counted: the
 * last owner's release closes it. The table is guarded by the fork-close
 * lock (core/forkclose.h), under which owners release (their closeFds,
 * also in a forked child, where every owner's release empties it). */
#ifndef CHORUS_BOOTSTRAP_PIDWATCH_H
#define CHORUS_BOOTSTRAP_PIDWATCH_H
#include <sys/types.h>

/* A pidfd for the process pid, which is alive (it has just connected):
 * the one this process holds for it already, or a new one; -1 where the
 * kernel gives none (errno). A held one that is readable (that process
 * exited: pid is another process now) is not given out again. */
int pidWatchOpen(pid_t pid);

/* Drops one owner of fd (from pidWatchOpen); under the fork-close lock. */
void pidWatchReleaseLocked(int fd);

#endif
