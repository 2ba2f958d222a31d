/* NCCL's tuner plugins (NCCL_TUNER_PLUGIN), loaded by NCCL's names and
 * versions: the newest table the library exports, ncclTunerPlugin_v6 down
 * to _v2, behind one interface (version 6's calls; a version 2 plugin's
 * pick becomes a free table entry, as NCCL's adapter makes it). One library
 * per process, loaded with the first context and unloaded with the last.
 * The tuner (tune/plugin.c) decides what the table holds and what runs. */
#ifndef CHORUS_PLUGIN_TUNER_H
#define CHORUS_PLUGIN_TUNER_H
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "plugin/tuner_abi.h"

/* A context for one communicator: loads the plugin first when no context
 * holds it. *loaded 0 (and ncclSuccess): there is no plugin. The plugin's
 * init failing: its error (an invalid one, or ncclInProgress, as
 * ncclInternalError), with a WARN. */
ncclResult_t tunerPluginInit(void **ctx, int *loaded, uint64_t commId, size_t nRanks, size_t nNodes, int minLocal,
                             int maxLocal);
/* getCollInfo for NCCL's function func (tuneAbiFunc*) of nBytes, on table. */
ncclResult_t tunerPluginGetCollInfo(void *ctx, int func, size_t nBytes, float table[][tuneAbiProtos], int regBuff,
                                    int *nChannels);
/* finalize (destroy before version 5); the last context unloads. */
void tunerPluginFinalize(void *ctx);
/* The loaded plugin's name, for messages. */
const char *tunerPluginName(void);

#endif
