/* Chooses the algorithm and the number of channels for one operation. Every
 * rank must choose the same, so the choice depends only on arguments all
 * ranks share (collective, bytes, nranks, configuration). */
#ifndef CHORUS_TUNE_TUNE_H
#define CHORUS_TUNE_TUNE_H
#include <stddef.h>

struct tuneChoice {
  int algo; /* enum algoId */
  int nch;
};

/* bytes: the per-rank message (count × element size); slotBytes: FIFO slot. */
struct tuneChoice tuneChoose(int coll, size_t bytes, int nranks, int maxNch, size_t slotBytes);

#endif
