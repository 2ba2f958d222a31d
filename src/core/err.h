/* Errors are values (DESIGN.md invariant 4): one macro propagates them. */
#ifndef CHORUS_CORE_ERR_H
#define CHORUS_CORE_ERR_H
#include "nccl.h"

#define CHECK(call)                               \
  do {                                            \
    ncclResult_t checkRes_ = (call);              \
    if (checkRes_ != ncclSuccess) return checkRes_; \
  } while (0)

/* For functions that must release what they took before returning. */
#define CHECKGOTO(call, res, label) \
  do {                              \
    (res) = (call);                 \
    if ((res) != ncclSuccess) goto label; \
  } while (0)

#define SYSCHECK(call, name)                                                 \
  do {                                                                       \
    if ((call) < 0) {                                                        \
      WARN("Call to %s failed: %s", (name), strerror(errno));               \
      return ncclSystemError;                                                \
    }                                                                        \
  } while (0)

#endif
