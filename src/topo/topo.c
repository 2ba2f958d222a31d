#define _GNU_SOURCE
#include "topo/topo.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/machine.h"

#ifdef CHORUS_HAVE_HWLOC
#include <hwloc.h>
#endif

/* The host's part, discovered once per process (hwloc's load takes
 * milliseconds; communicators are made by the hundred in tests). */
static struct topoRank hostPart, hostQuick;
static pthread_once_t hostOnce = PTHREAD_ONCE_INIT, quickOnce = PTHREAD_ONCE_INIT;

static int readInt(const char *path, int dflt) {
  FILE *f = fopen(path, "r");
  int v = dflt;
  if (f) {
    if (fscanf(f, "%d", &v) != 1) v = dflt;
    fclose(f);
  }
  return v;
}

/* The kernel's NUMA distances and each NIC's speed and node come from sysfs
 * either way (hwloc reads the same files). */
static void sysfsExtras(struct topoRank *h) {
  for (int i = 0; i < TOPO_MAX_NUMA && i < h->numaNodes; i++) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/distance", i);
    FILE *f = fopen(path, "r");
    for (int j = 0; j < TOPO_MAX_NUMA; j++) {
      int d = i == j ? 10 : 20;
      if (f && fscanf(f, "%d", &d) != 1) d = i == j ? 10 : 20;
      h->numaDistance[i][j] = (uint8_t)(d > 255 ? 255 : d);
    }
    if (f) fclose(f);
  }
  for (int k = 0; k < h->nnics; k++) {
    char path[96];
    snprintf(path, sizeof path, "/sys/class/net/%s/speed", h->nics[k].name);
    int s = readInt(path, 0);
    h->nics[k].speedMbps = s > 0 ? s : 0;
    if (h->nics[k].numa < 0) {
      snprintf(path, sizeof path, "/sys/class/net/%s/device/numa_node", h->nics[k].name);
      h->nics[k].numa = (int16_t)readInt(path, -1);
    }
  }
}

/* NICs from /sys/class/net: the ones backed by a device (not lo, bridges,
 * veth), their node from the device. (hwloc's I/O discovery finds the same
 * and takes ten times its CPU discovery: 30-60 ms a process here.) */
static void sysfsNics(struct topoRank *h) {
  DIR *d = opendir("/sys/class/net");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL && h->nnics < TOPO_MAX_NICS) {
    char path[320];
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/sys/class/net/%s/device", e->d_name);
    if (access(path, F_OK) != 0) continue;
    snprintf(h->nics[h->nnics].name, sizeof h->nics[0].name, "%.15s", e->d_name);
    h->nics[h->nnics++].numa = -1;
  }
  if (d) closedir(d);
}

/* Without hwloc: cores and PUs from sysconf, NUMA nodes from sysfs. */
static void discoverSysfs(struct topoRank *h) {
  snprintf(h->source, sizeof h->source, "sysfs");
  h->pus = (int16_t)sysconf(_SC_NPROCESSORS_ONLN);
  h->cores = h->pus;
  h->packages = 1;
  int nodes = 0;
  for (int i = 0; i < 64; i++) {
    char path[64];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d", i);
    if (access(path, F_OK) == 0) nodes++;
  }
  h->numaNodes = (int16_t)(nodes ? nodes : 1);
  h->l3KiB = (uint32_t)(sysconf(_SC_LEVEL3_CACHE_SIZE) / 1024);
  h->l2KiB = (uint32_t)(sysconf(_SC_LEVEL2_CACHE_SIZE) / 1024);
}

#ifdef CHORUS_HAVE_HWLOC
static void discoverHwloc(struct topoRank *h) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) return discoverSysfs(h);
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    return discoverSysfs(h);
  }
  snprintf(h->source, sizeof h->source, "hwloc");
  h->packages = (int16_t)hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
  h->numaNodes = (int16_t)hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  h->cores = (int16_t)hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  h->pus = (int16_t)hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  hwloc_obj_t l3 = hwloc_get_obj_by_type(t, HWLOC_OBJ_L3CACHE, 0), l2 = hwloc_get_obj_by_type(t, HWLOC_OBJ_L2CACHE, 0);
  if (l3 && l3->attr) h->l3KiB = (uint32_t)(l3->attr->cache.size / 1024);
  if (l2 && l2->attr) h->l2KiB = (uint32_t)(l2->attr->cache.size / 1024);
  hwloc_topology_destroy(t);
}
#endif

static void hostDefaults(struct topoRank *h) {
  uint64_t boot = machineBootHash(FNV1A_INIT);
  h->kernel = boot == FNV1A_INIT ? 0 : boot; /* 0: unknown, shared with no one */
  sysfsNics(h);
  if (h->pus <= 0) h->pus = (int16_t)sysconf(_SC_NPROCESSORS_ONLN);
  if (h->cores <= 0) h->cores = h->pus;
  if (h->numaNodes <= 0) h->numaNodes = 1;
  if (h->packages <= 0) h->packages = 1;
  sysfsExtras(h);
}

static void discoverHost(void) {
#ifdef CHORUS_HAVE_HWLOC
  discoverHwloc(&hostPart);
#else
  discoverSysfs(&hostPart);
#endif
  hostDefaults(&hostPart);
}

static void discoverQuick(void) {
  discoverSysfs(&hostQuick);
  hostDefaults(&hostQuick);
}

/* The NUMA node of cpu (from sysfs's nodeN/cpuN links), -1 when unknown. */
static int numaOfCpu(int cpu) {
  for (int n = 0; n < 64; n++) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpu%d", n, cpu);
    if (access(path, F_OK) == 0) return n;
  }
  return -1;
}

void topoDiscover(struct topoRank *me, int full) {
  if (full) {
    pthread_once(&hostOnce, discoverHost);
    *me = hostPart;
  } else {
    pthread_once(&quickOnce, discoverQuick);
    *me = hostQuick;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  me->numa = -1;
  me->ncpus = 0;
  me->cpus[0] = 0;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  size_t o = 0;
  for (int c = 0; c < CPU_SETSIZE; c++) { /* the CPUs as ranges: "0-3,8" */
    if (!CPU_ISSET(c, &set)) continue;
    int end = c;
    while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, &set)) end++;
    me->ncpus += (int16_t)(end - c + 1);
    if (o + 16 < sizeof me->cpus)
      o += (size_t)snprintf(me->cpus + o, sizeof me->cpus - o, end > c ? "%s%d-%d" : "%s%d", o ? "," : "", c, end);
    c = end;
  }
  int numa = topoThreadNuma();
  me->numa = (int16_t)(numa >= 0 ? numa : me->numaNodes == 1 ? 0 : -1);
}

int topoCpuListAdd(const char *list, uint64_t set[TOPO_CPU_WORDS]) {
  int named = 0;
  for (const char *p = list; *p;) {
    char *end;
    long lo = strtol(p, &end, 10), hi = lo;
    if (end == p) break;
    if (*end == '-') {
      p = end + 1;
      hi = strtol(p, &end, 10);
      if (end == p) break;
    }
    for (long c = lo; c <= hi && c >= 0 && c < 64 * TOPO_CPU_WORDS; c++) {
      set[c / 64] |= 1ull << (c % 64);
      named++;
    }
    p = *end == ',' ? end + 1 : end;
    if (*end != ',') break;
  }
  return named;
}

int topoNicNuma(const char *ifname) {
  char path[128];
  snprintf(path, sizeof path, "/sys/class/net/%.32s/device/numa_node", ifname);
  return readInt(path, -1);
}

int topoThreadNuma(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  int numa = -2;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    int n = numaOfCpu(c);
    numa = numa == -2 ? n : numa == n ? numa : -1;
    if (numa == -1) break;
  }
  return numa < 0 ? -1 : numa;
}

int topoNearest(const int *nicNuma, int n, int myNuma) {
  for (int i = 0; myNuma >= 0 && i < n; i++)
    if (nicNuma[i] == myNuma) return i;
  return 0;
}

void topoHostStr(const struct topoRank *r, char *out, size_t len) {
  int n = snprintf(out, len, "%d package%s, %d NUMA node%s, %d cores, %d PUs", r->packages, r->packages == 1 ? "" : "s",
                   r->numaNodes, r->numaNodes == 1 ? "" : "s", r->cores, r->pus);
  if (n > 0 && (size_t)n < len && r->l3KiB)
    n += snprintf(out + n, len - (size_t)n, ", L3 %u MiB", r->l3KiB / 1024 ? r->l3KiB / 1024 : 1);
  for (int k = 0; k < r->nnics && n > 0 && (size_t)n < len; k++) {
    n += snprintf(out + n, len - (size_t)n, "%s%s (NUMA %d", k ? ", " : ", NICs ", r->nics[k].name, r->nics[k].numa);
    if ((size_t)n < len && r->nics[k].speedMbps) n += snprintf(out + n, len - (size_t)n, ", %d Mb/s", r->nics[k].speedMbps);
    if ((size_t)n < len) n += snprintf(out + n, len - (size_t)n, ")");
  }
  if (n > 0 && (size_t)n < len && r->nnics == 0) snprintf(out + n, len - (size_t)n, ", no NICs");
}

int topoDumpXml(const char *path, const struct topoRank *ranks, const int *hostOf, const char *const *hostNames,
                int n) {
  FILE *f = fopen(path, "w");
  if (!f) return errno;
  fprintf(f, "<system version=\"1\" producer=\"chorus\">\n");
  for (int h = 0;; h++) {
    int first = -1;
    for (int r = 0; r < n && first < 0; r++)
      if (hostOf[r] == h) first = r;
    if (first < 0) break;
    const struct topoRank *t = &ranks[first];
    fprintf(f, "  <host name=\"%s\" source=\"%s\" packages=\"%d\" cores=\"%d\" pus=\"%d\" l2_kib=\"%u\" l3_kib=\"%u\">\n",
            hostNames[first], t->source, t->packages, t->cores, t->pus, t->l2KiB, t->l3KiB);
    for (int m = 0; m < t->numaNodes && m < TOPO_MAX_NUMA; m++) {
      fprintf(f, "    <cpu numaid=\"%d\" distances=\"", m);
      for (int j = 0; j < t->numaNodes && j < TOPO_MAX_NUMA; j++) fprintf(f, "%s%d", j ? "," : "", t->numaDistance[m][j]);
      fprintf(f, "\">\n");
      for (int k = 0; k < t->nnics; k++)
        if (t->nics[k].numa == m || (t->nics[k].numa < 0 && m == 0))
          fprintf(f, "      <nic><net name=\"%s\" speed=\"%d\" numa=\"%d\"/></nic>\n", t->nics[k].name,
                  t->nics[k].speedMbps, t->nics[k].numa);
      for (int r = 0; r < n; r++)
        if (hostOf[r] == h && (ranks[r].numa == m || (ranks[r].numa < 0 && m == 0)))
          fprintf(f, "      <rank id=\"%d\" cpus=\"%s\" ncpus=\"%d\" numa=\"%d\" ifname=\"%s\"/>\n", r, ranks[r].cpus,
                  ranks[r].ncpus, ranks[r].numa, ranks[r].ifname);
      fprintf(f, "    </cpu>\n");
    }
    fprintf(f, "  </host>\n");
  }
  fprintf(f, "</system>\n");
  return fclose(f) == 0 ? 0 : errno;
}
