/* Test harness: forks one process per rank (real processes, as users run
 * chorus), each running the same function, and fails on any nonzero exit,
 * crash or overrun of the deadline. */
#ifndef CHORUS_TESTS_HARNESS_H
#define CHORUS_TESTS_HARNESS_H
#include <stdio.h>
#include <stdlib.h>

#include "nccl.h"

typedef int (*rankFn)(int rank, int nranks, ncclUniqueId id, void *arg);

/* Runs fn on nranks forked processes; returns the number of ranks that
 * failed (0 = all passed). deadlineSec bounds the whole run; a rank whose
 * fn returns nonzero (a failed check) ends it at once, the others killed
 * and counted as failed. A rank killed by a signal does not (fault tests
 * kill ranks on purpose). */
int runRanks(int nranks, rankFn fn, void *arg, int deadlineSec);
/* 1 when a launcher started every rank (CHORUS_TEST_LAUNCHED=1): runRanks
 * then runs only this process's own. */
int testLaunched(void);
/* Pins the calling thread (and the processes it forks from now on) to CPU
 * cpu alone; 0 on success, else -1 with errno set. */
int pinToCpu(int cpu);
/* The id runRanks uses: ncclGetUniqueId's, or with CHORUS_TEST_COMM_ID=1
 * (make tsan) one whose root rank 0 hosts. 0 on success. */
int testCommId(ncclUniqueId *id);
/* 1 once nobody listens at id's rendezvous address, within waitSec
 * (0: look once): its root has ended. */
/* A loopback address whose port nothing listens on (bound, then closed):
 * 0, or 1 when none could be had. */
struct sockaddr_in;
int testFreePort(struct sockaddr_in *a);
int idRootGone(const ncclUniqueId *id, double waitSec);
/* What a test's time bounds are multiplied by: CHORUS_TEST_TIME_SCALE
 * (default 1), which the memcheck runs set, since valgrind runs a
 * process's threads one at a time, many times slower. */
double testTimeScale(void);
/* An id as text, for a rank that execs itself: hex holds 2 digits per byte
 * and a NUL; idFromHex reads it back (0 on success). */
void idToHex(const ncclUniqueId *id, char hex[2 * NCCL_UNIQUE_ID_BYTES + 1]);
int idFromHex(const char *hex, ncclUniqueId *id);
/* The same with an id the caller made. */
int runRanksWithId(int nranks, ncclUniqueId id, rankFn fn, void *arg, int deadlineSec);

#define NCCLCHECK(call)                                                                          \
  do {                                                                                           \
    ncclResult_t r_ = (call);                                                                    \
    if (r_ != ncclSuccess) {                                                                     \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_)); \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

#define EXPECT(cond, ...)                                               \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "%s:%d: expected %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                     \
      fprintf(stderr, "\n");                                            \
      return 1;                                                         \
    }                                                                   \
  } while (0)

/* Buffers with guard bytes on both sides: from malloc, or from
 * ncclMemAlloc (guardMemAlloc; NULL when it fails); guardFree frees
 * either. */
void *guardAlloc(size_t bytes);
void *guardMemAlloc(size_t bytes);
int guardCheck(void *p); /* 0 when both guards are intact */
void guardFree(void *p);
/* A new directory /tmp/chorus-NAME-XXXXXX in dir (at least 64 bytes) that
 * this process removes, with the files in it, when it exits (forked ranks
 * leave it alone): a test leaves nothing behind, pass or fail, unless
 * CHORUS_TEST_KEEP is set (for a look at a failure's logs). 0 on success. */
int tempDir(char *dir, const char *name);
/* Logging to a file per process (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=subsys,
 * NCCL_DEBUG_FILE=dir/log.%p) in a new directory dir (at least 64 bytes)
 * named after name; call it before the first NCCL call, which starts the
 * logging. 0 on success. */
int logPerProcess(char *dir, const char *name, const char *subsys);
/* From here on process_vm_readv and process_vm_writev (CMA) fail with
 * EPERM in every thread of this process, as a container's seccomp filter
 * makes them; 0 on success. */
int denyCma(void);
/* From here on pidfd_open fails with ENOSYS in every thread of this
 * process, as on a kernel before 5.3; 0 on success. */
int denyPidfd(void);
/* The same for process_vm_writev only: this process reads its peers'
 * memory but cannot write it. */
int denyCmaWrite(void);
/* From here on this process dies (SIGSYS) as it calls process_vm_writev:
 * in the middle of whatever it does when it does. */
int dieOnCmaWrite(void);
/* From here on the thread that calls process_vm_writev stops there for
 * good (it waits in a SIGSYS handler), its process alive: a stuck peer.
 * The handler stores the time (nowSec) in *at as it starts waiting. */
int stallOnCmaWrite(volatile double *at);

double nowSec(void);
/* How many lines of the file at path hold needle; -1 when it cannot be read. */
int fileLinesWith(const char *path, const char *needle);
/* A machine-readable line for bench/faults: "fault-time: FAULT | RESULT | MS". */
void faultTime(const char *fault, ncclResult_t res, double ms);
#endif
