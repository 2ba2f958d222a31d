/* Launching group items (launch.c). */
#ifndef CHORUS_API_LAUNCH_H
#define CHORUS_API_LAUNCH_H
#include "api/group.h"

/* Builds and runs (NULL stream) or queues (other streams) n items, numbering
 * them first; returns the first error. */
ncclResult_t launchItems(struct groupItem *items, int n);

#endif
