/* NCCL_API defines pncclX and makes ncclX an alias of it, so profilers can
 * interpose on either name (as NCCL and MPI do). */
#ifndef CHORUS_API_API_H
#define CHORUS_API_API_H
#include "nccl.h"

#define NCCL_API(ret, name, ...)                                                        \
  ret name(__VA_ARGS__) __attribute__((visibility("default"), alias("p" #name)));       \
  __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

#endif
