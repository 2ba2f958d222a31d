/* src/topo without processes: the interface chosen for a thread's NUMA
 * node (topoNearest, as the socket interface choice uses it), and the two
 * discoveries (hwloc's, when built with it, and sysfs's) agreeing on what
 * both see (hwloc counts what the process may use, sysfs what is online). */
#include <stdio.h>
#include <string.h>

#include "topo/topo.h"

#define EXPECT(c, ...)                                   \
  do {                                                   \
    if (!(c)) {                                          \
      fprintf(stderr, "test_topo: %s: ", #c);            \
      fprintf(stderr, __VA_ARGS__);                      \
      fprintf(stderr, "\n");                             \
      return 1;                                          \
    }                                                    \
  } while (0)

int main(void) {
  int nodes[] = {0, 1, 1, 0};
  EXPECT(topoNearest(nodes, 4, 1) == 1, "node 1's nearest of {0,1,1,0}");
  EXPECT(topoNearest(nodes, 4, 0) == 0, "node 0's nearest");
  EXPECT(topoNearest(nodes, 4, 2) == 0, "no NIC on node 2: the first");
  EXPECT(topoNearest(nodes, 4, -1) == 0, "a thread on several nodes: the first");
  int unknown[] = {-1, -1};
  EXPECT(topoNearest(unknown, 2, 0) == 0, "NICs of no node: the first");
  int late[] = {-1, 3};
  EXPECT(topoNearest(late, 2, 3) == 1, "the one on the thread's node");
  struct topoRank quick, full;
  topoDiscover(&quick, 0);
  topoDiscover(&full, 1);
  /* hwloc counts what this process may use, sysfs what is online. */
  EXPECT(full.pus >= 1 && quick.pus >= full.pus, "PUs: sysfs %d, %s %d", quick.pus, full.source, full.pus);
  EXPECT(full.numaNodes >= 1 && quick.numaNodes >= full.numaNodes, "NUMA nodes: %d and %d", quick.numaNodes,
         full.numaNodes);
  EXPECT(quick.ncpus >= 1 && quick.ncpus == full.ncpus && !strcmp(quick.cpus, full.cpus), "CPUs %s and %s", quick.cpus,
         full.cpus);
  EXPECT(quick.nnics == full.nnics, "NICs");
  EXPECT(full.numa == topoThreadNuma() || (full.numa == 0 && topoThreadNuma() == -1 && full.numaNodes == 1),
         "the thread's node: %d and %d", full.numa, topoThreadNuma());
  char s[400];
  topoHostStr(&full, s, sizeof s);
  EXPECT(strstr(s, "package") && strstr(s, "PUs"), "%s", s);
  printf("test_topo: nearest NIC choice; %s and sysfs agree (%s)\n", full.source, s);
  return 0;
}
