/* The tuner plugin inside the tuner (tune.c): NCCL's cost table of one
 * collective, handed to the plugin, and the choice it leaves. */
#ifndef CHORUS_TUNE_PLUGIN_H
#define CHORUS_TUNE_PLUGIN_H
#include "engine/desc.h"
#include "tune/tune.h"

/* costs[algo][proto]: the model's time for each choice chorus has (< 0: not
 * a choice: excluded, unsupported, does not fit), with nch[algo] its
 * channels. The plugin sees NCCL's table (Tree; Ring, the cheaper of the
 * ring and the chain; LL and Simple) and may change it and the channels;
 * *best becomes the cheapest choice afterwards: the table's first cheapest
 * entry in NCCL's order, unless one of chorus's own algorithms (OneHop,
 * recursive doubling, ...), which the plugin cannot name, is cheaper at the
 * model's time. Errors: the plugin's, and NCCL's "No algorithm/protocol
 * available" when it left nothing. */
ncclResult_t tunePluginAdjust(const struct tuneTable *t, int coll, size_t bytes, int dtype,
                              double costs[algoCount][protoCount], const int nch[algoCount], int maxNch, int regBuff,
                              struct tuneChoice *best);

#endif
