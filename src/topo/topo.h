/* What chorus sees of the machine (hwloc where the build has it, else
 * sysfs): each rank's host (packages, NUMA nodes, cores, caches, NICs and
 * their NUMA locality) and the rank's own CPUs and NUMA node. Every rank
 * discovers its own at init and the communicator exchanges them, for the
 * log (NCCL_DEBUG=INFO "Topology:" lines), NCCL_TOPO_DUMP_FILE and
 * chorus-info --topo. */
#ifndef CHORUS_TOPO_TOPO_H
#define CHORUS_TOPO_TOPO_H
#include <stddef.h>
#include <stdint.h>

#define TOPO_MAX_NICS 8
#define TOPO_MAX_NUMA 8

struct topoNic {
  char name[16];
  int16_t numa;     /* NUMA node it is attached to (-1: none known) */
  int32_t speedMbps; /* 0: unknown */
};

/* One rank, as it tells the others (plain data, exchanged as bytes). */
struct topoRank {
  /* its host */
  int16_t packages, numaNodes, cores, pus;
  uint64_t kernel; /* the running kernel's boot id, hashed: hosts (namespaces, containers) with the same one share CPUs */
  uint32_t l3KiB, l2KiB;
  int16_t nnics;
  struct topoNic nics[TOPO_MAX_NICS];
  uint8_t numaDistance[TOPO_MAX_NUMA][TOPO_MAX_NUMA]; /* the kernel's node distances (10: local) */
  /* the rank */
  int16_t numa;   /* the NUMA node of its CPUs (-1: several or unknown) */
  int16_t ncpus;  /* CPUs it may run on */
  char cpus[48];  /* them, as a list: "0-3,8" */
  char ifname[16]; /* the interface its sockets use */
  char source[8]; /* "hwloc" or "sysfs" */
};

/* The L3 a host's ranks share, as the engine and the tuner count it: at
 * most 32 MiB, since what a VM or a many-chiplet CPU reports is often the
 * whole package's, of which a process sees one slice (this machine says
 * 480 MiB, and behaves as 32: see api/comm.c's NT stores); 32 MiB when
 * unknown (l3KiB 0). */
#define TOPO_L3_MAX (32ull << 20)
static inline uint64_t topoCacheBytes(uint32_t l3KiB) {
  uint64_t l3 = (uint64_t)l3KiB * 1024;
  return l3 == 0 || l3 > TOPO_L3_MAX ? TOPO_L3_MAX : l3;
}
/* From what size an operation's output leaves that cache: twice the L3
 * over the host's ranks (the engine's NT stores start there, and the tuner
 * knows it). */
static inline uint64_t topoPastCacheBytes(uint64_t cacheBytes, int localRanks) {
  return 2 * cacheBytes / (uint64_t)(localRanks > 0 ? localRanks : 1);
}

/* This rank's view: the host (discovered once per process) and the calling
 * thread's CPUs. full: through hwloc (packages, cores and caches as it
 * sees them; a few milliseconds a process), else from sysconf and sysfs
 * alone (cores counted as CPUs). */
void topoDiscover(struct topoRank *me, int full);
/* The NUMA node of interface ifname's device (-1: none or unknown), and
 * the one the calling thread's CPUs belong to (-1: several or unknown). */
int topoNicNuma(const char *ifname);
int topoThreadNuma(void);
/* Of n candidate interfaces whose NUMA nodes are nicNuma[], the one for a
 * thread on node myNuma: the first on that node, else the first (-1
 * nodes match nothing). */
int topoNearest(const int *nicNuma, int n, int myNuma);

/* The CPUs of a topoRank's cpus list ("0-3,8") added to *set (as a bitmask
 * of CPUs 0..63 and more: bit c of words[c / 64], TOPO_CPU_WORDS words).
 * Returns how many the list names, which is less than its ncpus where the
 * list was cut short. */
#define TOPO_CPU_WORDS 16
int topoCpuListAdd(const char *list, uint64_t set[TOPO_CPU_WORDS]);

/* "1 package, 1 NUMA node, 2 cores, 2 PUs, L3 32 MiB, NICs eth0 (NUMA -1, 10000 Mb/s)" */
void topoHostStr(const struct topoRank *r, char *out, size_t len);
/* Writes ranks[0..n)'s view as XML in NCCL's spirit (a <system> of hosts,
 * their CPUs / NUMA nodes, NICs and the ranks on each); hostOf gives each
 * rank's host. 0 on success, else errno. */
int topoDumpXml(const char *path, const struct topoRank *ranks, const int *hostOf, const char *const *hostNames,
                int n);

#endif
