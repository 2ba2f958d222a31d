#ifndef CHORUS_PERF_COLLS_H
#define CHORUS_PERF_COLLS_H
#include "common.h"
extern const struct testColl allReduceColl, allGatherColl, reduceScatterColl, broadcastColl, reduceColl,
    sendRecvColl, hypercubeColl, alltoallColl, alltoallvColl, gatherColl, scatterColl;
/* Element size of the datatype being run (the 16-byte rounding needs it). */
void perfCollsSetEltSize(size_t esz);
#endif
