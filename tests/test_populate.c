/* FIFO pages over shared memory (transport/conn.c connPopulate): setup
 * faults in only each slot's first page, a small message (8 bytes) faults
 * in nothing more, and the first message of a page or more (64 KiB) has
 * the whole FIFO faulted in, on the sending side and then on the
 * receiving one, so that later messages meet no page faults.
 * What a process has faulted in of its FIFO segments is the resident size
 * of its "chorus-fifo" mappings (/proc/self/smaps): 2 ranks, one ring
 * channel, the protocol named on the command line (Simple or LL), so each
 * rank sends on one FIFO (in its peer's segment) and receives on one (in
 * its own). The results are checked too. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define FIFO_BYTES (4u << 20) /* NCCL_BUFFSIZE, set below */
#define BIG_COUNT (16384)     /* 64 KiB of floats: past every slot's first page */

/* KiB of this process's "chorus-fifo" mappings in memory, or -1. */
static long fifoResidentKiB(void) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int inFifo = 0;
  long kib = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line; its fields follow */
      inFifo = strstr(line, "chorus-fifo") != NULL;
      continue;
    }
    long v;
    if (inFifo && sscanf(line, "Rss: %ld kB", &v) == 1) kib += v;
  }
  fclose(f);
  return kib;
}

static int allReduceChecked(ncclComm_t comm, int rank, int nranks, size_t count) {
  float *send = malloc(count * sizeof *send), *recv = malloc(count * sizeof *recv);
  if (!send || !recv) return 1;
  for (size_t i = 0; i < count; i++) send[i] = (float)(rank + 1) * (float)(i % 7);
  NCCLCHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
  int bad = 0;
  for (size_t i = 0; i < count; i++) bad += recv[i] != (float)(nranks * (nranks + 1) / 2) * (float)(i % 7);
  free(send);
  free(recv);
  if (bad) fprintf(stderr, "rank %d: %d of %zu elements wrong\n", rank, bad, count);
  return bad != 0;
}

static int rankMain(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  long atSetup = fifoResidentKiB();
  if (allReduceChecked(comm, rank, nranks, 2)) return 1;
  long afterSmall = fifoResidentKiB();
  /* No rank starts the large one (whose sender may fault its FIFO in, which
   * a receiver still in the small one would follow) before every rank has
   * looked: this one cannot end before every rank has called it. */
  if (allReduceChecked(comm, rank, nranks, 2)) return 1;
  if (allReduceChecked(comm, rank, nranks, BIG_COUNT)) return 1;
  long afterBig = fifoResidentKiB();
  NCCLCHECK(ncclCommDestroy(comm));
  printf("rank %d: FIFO segments resident: %ld KiB at setup, %ld after 8 B, %ld after 64 KiB\n", rank, atSetup,
         afterSmall, afterBig);
  if (atSetup <= 0) {
    fprintf(stderr, "rank %d: no chorus-fifo mapping found in /proc/self/smaps\n", rank);
    return 1;
  }
  /* An 8-byte message stays in pages setup faulted in (at most a few
   * control lines of the exchange's other lanes may add a page each). */
  if (afterSmall - atSetup > 256) {
    fprintf(stderr, "rank %d: an 8-byte AllReduce faulted in %ld KiB of FIFO\n", rank, afterSmall - atSetup);
    return 1;
  }
  /* Both of this rank's FIFOs whole: the one it sends on and the one it
   * receives on (without populating, 64 KiB touches about 70 KiB of each). */
  long want = 2 * (long)(FIFO_BYTES / 1024) * 9 / 10;
  if (afterBig - afterSmall < want) {
    fprintf(stderr, "rank %d: a 64 KiB AllReduce left only %ld KiB more FIFO in memory, expected at least %ld\n", rank,
            afterBig - afterSmall, want);
    return 1;
  }
  return 0;
}

/* Why this kernel cannot show it (NULL: it can): no MADV_POPULATE_WRITE
 * (before 5.14, or a sandbox's filter), or shared memory in huge pages
 * (setup's first touch of a slot then maps 2 MiB at once). */
static const char *cannotShow(void) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
  if (f) {
    char line[256] = "";
    int huge = fgets(line, sizeof line, f) && (strstr(line, "[always]") || strstr(line, "[force]") ||
                                                 strstr(line, "[within_size]"));
    fclose(f);
    if (huge) return "shared memory comes in transparent huge pages here";
  }
  int fd = memfd_create("chorus-populate-probe", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, 8192) != 0) return "no memfd";
  void *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return "no shared mapping";
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
  int refused = madvise(p, 8192, MADV_POPULATE_WRITE) != 0;
  munmap(p, 8192);
  return refused ? "madvise(MADV_POPULATE_WRITE) is refused here" : NULL;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "Simple") != 0 && strcmp(argv[1], "LL") != 0)) {
    fprintf(stderr, "usage: %s Simple|LL\n", argv[0]);
    return 2;
  }
  const char *why = cannotShow();
  if (why) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  setenv("NCCL_BUFFSIZE", "4194304", 1);
  setenv("NCCL_ALGO", "Ring", 1);
  setenv("NCCL_PROTO", argv[1], 1);
  setenv("NCCL_MAX_NCHANNELS", "1", 1);
  setenv("CHORUS_SINGLE_COPY", "0", 1); /* the data through the FIFOs */
  int failed = runRanks(2, rankMain, NULL, 20);
  printf("%s\n", failed ? "FAIL" : "PASS");
  return failed != 0;
}
