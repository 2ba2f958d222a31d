/* NCCL's profiler plugins (NCCL_PROFILER_PLUGIN), loaded by NCCL's names
 * and versions: the newest table the library exports, ncclProfiler_v6 down
 * to _v1, behind one interface that speaks version 6's descriptors (older
 * plugins get them translated, as NCCL's adapters do, and events their
 * version does not know are not sent). One library per process, loaded with
 * the first communicator's context and unloaded with the last. What the
 * events are and when they start is trace/profile.c's. */
#ifndef CHORUS_PLUGIN_PROFILER_H
#define CHORUS_PLUGIN_PROFILER_H
#include <stdint.h>
#include <sys/types.h>

/* The descriptors, in plugin/profiler_abi.h, which only the loader and the
 * events built for it include. */
struct profDescrV6;
union profStateArgs;

/* 1 while a plugin is loaded (read with an acquire load). */
extern int profilerPluginLoaded;

/* A communicator's context: loads the plugin first when no context holds
 * it. 0 (and *ctx NULL): no plugin, or its init failed (logged; the rank
 * goes on without one). */
int profilerPluginInit(void **ctx, uint64_t commHash, const char *commName, int nNodes, int nranks, int rank);
/* The plugin's finalize for ctx (NULL: nothing); the last context unloads. */
void profilerPluginFinalize(void *ctx);

/* The events the plugin wants now (its activation mask, which it may
 * change at any time; 0 with none loaded). */
int profilerPluginMask(void);
/* Loads so far (a handle from an earlier load is stale), and the pid that
 * loaded (NCCL's ProxyOp pid). */
int profilerPluginGen(void);
pid_t profilerPluginPid(void);

/* Starts an event, returning the plugin's handle (NULL: none: no ctx, or a
 * version that does not know the event); records a state of one, with its
 * arguments; stops one (NULL handles are ignored). */
void *profilerPluginStartEvent(void *ctx, struct profDescrV6 *d);
void profilerPluginRecordState(void *handle, int state, union profStateArgs *args);
void profilerPluginStopEvent(void *handle);

/* NCCL's name for a datatype (ncclDataType_t), as descriptors carry it. */
const char *profilerDtypeName(int dtype);

#endif
