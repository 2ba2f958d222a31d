/* Chooses the algorithm and the number of channels for one operation. Every
 * rank must choose the same, so the choice depends only on arguments all
 * ranks share (collective, bytes, nranks) and on a configuration every rank
 * holds alike: rank 0's, agreed at init (api/init.c). The descriptor carries
 * the choice, so a disagreement is still an error on every rank. */
#ifndef CHORUS_TUNE_TUNE_H
#define CHORUS_TUNE_TUNE_H
#include <stddef.h>
#include <stdint.h>

/* The tuning variables, read once per communicator from rank 0's
 * environment (a plain struct: it travels in the init all-gather). */
struct tuneConfig {
  int64_t smallThreshold; /* CHORUS_SMALL_THRESHOLD */
};
void tuneConfigFromEnv(struct tuneConfig *cfg);

struct tuneChoice {
  int algo; /* enum algoId */
  int nch;
};

/* bytes: the per-rank message (count × element size); slotBytes: FIFO slot. */
struct tuneChoice tuneChoose(const struct tuneConfig *cfg, int coll, size_t bytes, int nranks, int maxNch,
                             size_t slotBytes);

#endif
