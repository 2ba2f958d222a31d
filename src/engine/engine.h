/* Runs schedules: progresses every task of a schedule, honouring the order
 * of tasks on one lane, until all are done or one fails. Progress never
 * blocks (DESIGN.md invariant 2); when a whole round moved nothing, the one
 * wait decides whether to spin, yield, sleep or give up. */
#ifndef CHORUS_ENGINE_ENGINE_H
#define CHORUS_ENGINE_ENGINE_H
#include "engine/schedule.h"

/* Runs to completion. On failure the failing task's error is returned. */
ncclResult_t engineRun(struct schedule *s);

#endif
