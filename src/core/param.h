/* One table of every NCCL_* / CHORUS_* parameter (DESIGN.md invariant 7).
 * Values come from the environment, then NCCL_CONF_FILE or ~/.nccl.conf,
 * then /etc/nccl.conf, all of it seen through an environment plugin when
 * one is loaded (NCCL_ENV_PLUGIN: paramSetSource); read at the first call
 * and again each time a communicator is created (paramReload). */
#ifndef CHORUS_CORE_PARAM_H
#define CHORUS_CORE_PARAM_H
#include <stdint.h>
#include <stdio.h>

/* X(id, env name, kind, default, doc); kind: 0 a number, 1 a string, 2 a
 * string never logged (a secret) */
#define CHORUS_PARAM_TABLE(X)                                                                     \
  X(Debug, "NCCL_DEBUG", 1, "", "log level: VERSION, WARN, INFO, TRACE")                          \
  X(DebugSubsys, "NCCL_DEBUG_SUBSYS", 1, "INIT,BOOTSTRAP,ENV",                                    \
    "subsystems logged at INFO: INIT,COLL,P2P,SHM,NET,BOOTSTRAP,ENV,ALLOC,TUNING,PROFILE,ALL; ^ inverts") \
  X(DebugFile, "NCCL_DEBUG_FILE", 1, "", "log file instead of stdout; %h host, %p pid")          \
  X(BuffSize, "NCCL_BUFFSIZE", 0, "4194304", "bytes of FIFO per connection (unset: 524288 when every rank has a host of its own)")    \
  X(CommId, "NCCL_COMM_ID", 1, "", "host:port of the bootstrap root; rank 0 hosts it")            \
  X(ShmDisable, "NCCL_SHM_DISABLE", 0, "0", "1 disables the shared-memory transport")             \
  X(HostId, "NCCL_HOSTID", 1, "", "overrides the host identity (default hostname + boot id)")     \
  X(MinNChannels, "NCCL_MIN_NCHANNELS", 0, "-2", "fewest channels (-2: auto)")                    \
  X(MaxNChannels, "NCCL_MAX_NCHANNELS", 0, "-2", "most channels (-2: auto)")                      \
  X(MinNRings, "NCCL_MIN_NRINGS", 0, "-2", "NCCL_MIN_NCHANNELS's old name (NCCL_MIN_NCHANNELS wins when both are set)") \
  X(MaxNRings, "NCCL_MAX_NRINGS", 0, "-2", "NCCL_MAX_NCHANNELS's old name (NCCL_MAX_NCHANNELS wins when both are set)") \
  X(MinCtas, "NCCL_MIN_CTAS", 0, "0", "fewest channels, over config.minCTAs (0: the config's)")  \
  X(MaxCtas, "NCCL_MAX_CTAS", 0, "0", "most channels, over config.maxCTAs (0: the config's)")    \
  X(SocketIfname, "NCCL_SOCKET_IFNAME", 1, "", "interfaces for sockets: prefixes, ^ excludes, = exact") \
  X(SocketFamily, "NCCL_SOCKET_FAMILY", 1, "", "AF_INET or AF_INET6")                             \
  X(SocketNThreads, "NCCL_SOCKET_NTHREADS", 0, "-2", "helper threads per socket connection, 0..16 (-2: auto)") \
  X(NSocksPerThread, "NCCL_NSOCKS_PERTHREAD", 0, "-2", "data sockets per helper thread (-2: auto)")  \
  X(SocketInline, "NCCL_SOCKET_INLINE", 0, "128", "largest message sent inline with its size header") \
  X(SocketMinTaskSize, "NCCL_SOCKET_MIN_TASKSIZE", 0, "65536", "smallest piece a message is split into across sockets") \
  X(IbDisable, "NCCL_IB_DISABLE", 0, "0", "1 disables InfiniBand (chorus has sockets only)")        \
  X(Net, "NCCL_NET", 1, "", "network transport by name: Socket (the only one)")                     \
  X(MultiRankGpuEnable, "NCCL_MULTI_RANK_GPU_ENABLE", 0, "0", "1: ncclCommInitAll takes a device more than once in devlist") \
  X(CommBlocking, "NCCL_COMM_BLOCKING", 0, "-1", "0 or 1 overrides config.blocking of each communicator created (-1: the config's)") \
  X(Timeout, "CHORUS_TIMEOUT", 0, "600", "seconds without progress before an operation fails")   \
  X(Secret, "CHORUS_SECRET", 2, "", "shared secret of an NCCL_COMM_ID / MASTER_ADDR rendezvous (chorusrun sets one per job)") \
  X(SecretFile, "CHORUS_SECRET_FILE", 1, "", "file whose first line is the secret, when CHORUS_SECRET is unset") \
  X(SocketBufSize, "CHORUS_SOCKET_BUFSIZE", 0, "0",                                               \
    "SO_SNDBUF/SO_RCVBUF of the socket transport's sockets (0: the kernel's); small ones force short writes and reads (tests)") \
  X(NtStores, "CHORUS_NT_STORES", 0, "-1",                                                       \
    "output bytes of an operation from which its output is written past the cache (-1: twice the L3 over the host's ranks; 0: never)") \
  X(SlotStream, "CHORUS_SLOT_STREAM", 0, "-1",                                                   \
    "FIFO slots over shared memory are written past the cache (streaming stores): -1 where the two ends measure it cheaper (slots of 16 KiB+), 0 never, 1 always (other values: -1)") \
  X(SingleCopy, "CHORUS_SINGLE_COPY", 0, "-1",                                                   \
    "bytes of an operation from which ranks on one host read each other's buffers directly (CMA: process_vm_readv) instead of through the FIFOs (-1: AllGather and Broadcast from CHORUS_NT_STORES's size while the host has a core per rank, from 1 MiB to below it where ranks share cores; 0: never, ncclMemAlloc's memory included, which is otherwise read in place at any size)") \
  X(CmaSplit, "CHORUS_CMA_SPLIT", 0, "-1",                                                       \
    "a single-copy (CMA) read offers its second half to the waiting sender, which writes it meanwhile (-1: reads of 64 KiB+ where the host has a core per local rank; 0: never; 1: every read of 8 KiB+)") \
  X(Check, "CHORUS_CHECK", 0, "1", "1 checks that every rank called the same operation (count, type, op, root)") \
  X(DumpSchedule, "CHORUS_DUMP_SCHEDULE", 0, "0", "1 prints every schedule built")                \
  X(LLThreshold, "CHORUS_SMALL_THRESHOLD", 0, "16384",                                            \
    "largest AllReduce or Broadcast, or AllGather/ReduceScatter block, in bytes for one hop")     \
  X(FlightRecorder, "CHORUS_FLIGHT_RECORDER", 0, "32",                                             \
    "operations each communicator's flight recorder keeps, dumped on a failure or SIGUSR1 (0: off)") \
  X(FlightRecorderFile, "CHORUS_FLIGHT_RECORDER_FILE", 1, "",                                       \
    "file the flight recorder's dumps are appended to; %h host, %p pid, %r rank (unset: the log only)") \
  X(Stats, "CHORUS_STATS", 0, "0", "1: at destroy each rank prints calls, bytes, time percentiles and busbw per collective and size") \
  X(TopoDumpFile, "NCCL_TOPO_DUMP_FILE", 1, "", "file the topology chorus sees is written to, as XML") \
  X(TopoDumpFileRank, "NCCL_TOPO_DUMP_FILE_RANK", 0, "0", "the rank that writes NCCL_TOPO_DUMP_FILE") \
  X(RingOrder, "CHORUS_RING_ORDER", 1, "host", "rings and chains visit ranks by host (host: a host's ranks together) or in rank order (rank); rank 0's holds") \
  X(Trace, "CHORUS_TRACE", 1, "", "timeline file (Chrome/Perfetto trace JSON) of each process; %h host, %p pid, %r rank") \
  X(TraceLevel, "CHORUS_TRACE_LEVEL", 1, "ops", "what CHORUS_TRACE records: ops, or steps (each task's steps and waits too)") \
  X(ProfilerPlugin, "NCCL_PROFILER_PLUGIN", 1, "",                                                 \
    "profiler plugin: a path, a name (libnccl-profiler-<name>.so), STATIC_PLUGIN or none; unset: libnccl-profiler.so") \
  X(TunerPlugin, "NCCL_TUNER_PLUGIN", 1, "",                                                       \
    "tuner plugin: a path, a name (libnccl-tuner-<name>.so), STATIC_PLUGIN or none; unset: libnccl-tuner.so") \
  X(EnvPlugin, "NCCL_ENV_PLUGIN", 1, "",                                                           \
    "environment plugin, read from the environment itself: a path, a name (libnccl-env-<name>.so) or none; unset: libnccl-env.so") \
  X(Algo, "NCCL_ALGO", 1, "", "algorithms allowed: Ring, Tree, RecDoubling, Rabenseifner, OneHop, Chain; ^ excludes; func:list;func:list") \
  X(Proto, "NCCL_PROTO", 1, "", "protocols allowed: Simple, LL, LL128; ^ excludes; func:list;func:list")

enum paramId {
#define CHORUS_PARAM_ENUM(id, env, isStr, def, doc) param##id,
  CHORUS_PARAM_TABLE(CHORUS_PARAM_ENUM)
#undef CHORUS_PARAM_ENUM
      paramCount
};

/* Reads the environment (and the conf files) again: each communicator's
 * creation starts with it, so variables set since the last reading count. */
void paramReload(void);
/* Where values come from, as NCCL's environment plugins provide them.
 * loader, called once at the first reading, after the values have been read
 * from the environment as it is (so that it may log), may install get:
 * every reading from then on asks get (NULL: unset) for each variable, and
 * the log starts again where that changes NCCL_DEBUG*. One loader per
 * process (plugin/env.c's, registered when the library loads). */
void paramSetSourceLoader(void (*loader)(void));
void paramSetSource(const char *(*get)(const char *name));
int64_t paramInt(enum paramId id);
const char *paramStr(enum paramId id); /* never NULL; "" when unset */
/* For the log (which reads parameters itself, so they cannot log while
 * loading): the variable's name and default, whether the environment (or a
 * conf file) set it, and the text it was set to when that was no number
 * (the default is used then; NULL otherwise). */
const char *paramName(enum paramId id);
const char *paramDefault(enum paramId id);
int paramFromEnv(enum paramId id);
const char *paramRejected(enum paramId id);
/* 1 for a value the log must not show (CHORUS_SECRET). */
int paramHidden(enum paramId id);
/* 1 for a number (paramInt holds it), 0 for text. */
int paramIsNumber(enum paramId id);
/* Prints the table (name, value, default, doc). */
void paramPrintAll(FILE *out);

#endif
