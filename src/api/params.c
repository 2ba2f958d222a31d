/* NCCL 2.30's parameter API over chorus's parameter table (core/param.h):
 * every NCCL_* and CHORUS_* variable chorus reads, by its name ("NCCL_"
 * may be left off a key), with the values of the latest reading (each
 * communicator's creation reads the environment and NCCL_CONF_FILE again).
 * Numbers read as any integer type they fit; text as a string. Handles
 * and returned strings belong to chorus (strings: until the thread's next
 * call of the same function). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "core/err.h"
#include "core/log.h"
#include "core/param.h"

struct ncclParamHandle {
  enum paramId id;
};
static struct ncclParamHandle handles[paramCount];

/* The parameter called key (or "NCCL_" key), or -1. */
static int paramByKey(const char *key) {
  for (int i = 0; i < paramCount; i++) {
    const char *name = paramName((enum paramId)i);
    if (strcmp(name, key) == 0 || (strncmp(name, "NCCL_", 5) == 0 && strcmp(name + 5, key) == 0)) return i;
  }
  return -1;
}

static int handleOk(ncclParamHandle_t h, const void *out, const char *call) {
  if (h == NULL || h < handles || h >= handles + paramCount) {
    WARN("%s : invalid parameter handle %p (ncclParamBind gives them)", call, (void *)h);
    return 0;
  }
  if (out == NULL) {
    WARN("%s : out argument is NULL", call);
    return 0;
  }
  return 1;
}

NCCL_API(ncclResult_t, ncclParamBind, ncclParamHandle_t *out, const char *key) {
  if (out == NULL || key == NULL) {
    WARN("ncclParamBind : %s argument is NULL", out == NULL ? "out" : "key");
    return ncclInvalidArgument;
  }
  int id = paramByKey(key);
  if (id < 0) {
    WARN("ncclParamBind : no parameter called %s", key);
    return ncclInvalidArgument;
  }
  handles[id].id = (enum paramId)id;
  *out = &handles[id];
  return ncclSuccess;
}

/* The parameter's number, when it is one and lies in [lo, hi]. */
static ncclResult_t numberIn(ncclParamHandle_t h, const void *out, int64_t lo, uint64_t hi, const char *call,
                             int64_t *v) {
  if (!handleOk(h, out, call)) return ncclInvalidArgument;
  if (!paramIsNumber(h->id)) {
    WARN("%s : %s is text, not a number (ncclParamGetStr reads it)", call, paramName(h->id));
    return ncclInvalidArgument;
  }
  *v = paramInt(h->id);
  if (*v < lo || (*v >= 0 && (uint64_t)*v > hi)) {
    WARN("%s : %s is %lld, which the type cannot hold", call, paramName(h->id), (long long)*v);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

#define PARAM_GET(suffix, type, lo, hi)                                                   \
  NCCL_API(ncclResult_t, ncclParamGet##suffix, ncclParamHandle_t h, type *out) {          \
    int64_t v;                                                                            \
    CHECK(numberIn(h, out, (lo), (hi), "ncclParamGet" #suffix, &v));                      \
    *out = (type)v;                                                                       \
    return ncclSuccess;                                                                   \
  }
PARAM_GET(I8, int8_t, INT8_MIN, INT8_MAX)
PARAM_GET(I16, int16_t, INT16_MIN, INT16_MAX)
PARAM_GET(I32, int32_t, INT32_MIN, INT32_MAX)
PARAM_GET(I64, int64_t, INT64_MIN, INT64_MAX)
PARAM_GET(U8, uint8_t, 0, UINT8_MAX)
PARAM_GET(U16, uint16_t, 0, UINT16_MAX)
PARAM_GET(U32, uint32_t, 0, UINT32_MAX)
PARAM_GET(U64, uint64_t, 0, UINT64_MAX)

/* A thread's copy of a value, valid until its next use by the same call. */
static const char *threadCopy(char *buf, size_t size, const char *value) {
  snprintf(buf, size, "%s", value);
  return buf;
}

NCCL_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t h, const char **out) {
  static _Thread_local char buf[4096];
  if (!handleOk(h, out, "ncclParamGetStr")) return ncclInvalidArgument;
  *out = threadCopy(buf, sizeof buf, paramStr(h->id));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGet, ncclParamHandle_t h, void *out, int maxLen, int *len) {
  if (!handleOk(h, out, "ncclParamGet")) return ncclInvalidArgument;
  if (len == NULL) {
    WARN("ncclParamGet : len argument is NULL");
    return ncclInvalidArgument;
  }
  int64_t v = paramInt(h->id);
  const char *s = paramStr(h->id);
  const void *bytes = paramIsNumber(h->id) ? (const void *)&v : (const void *)s;
  int need = paramIsNumber(h->id) ? (int)sizeof v : (int)strlen(s) + 1; /* a number's int64, or the text and its NUL */
  *len = need;
  if (maxLen < need) {
    WARN("ncclParamGet : %s needs %d bytes, maxLen is %d", paramName(h->id), need, maxLen);
    return ncclInvalidArgument;
  }
  memcpy(out, bytes, (size_t)need);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetParameter, const char *key, const char **value, int *valueLen) {
  static _Thread_local char buf[4096];
  if (key == NULL || value == NULL || valueLen == NULL) {
    WARN("ncclParamGetParameter : %s argument is NULL", key == NULL ? "key" : value == NULL ? "value" : "valueLen");
    return ncclInvalidArgument;
  }
  int id = paramByKey(key);
  if (id < 0) { /* NULL and 0 out, as NCCL's */
    *value = NULL;
    *valueLen = 0;
    WARN("ncclParamGetParameter : no parameter called %s", key);
    return ncclInvalidArgument;
  }
  *value = threadCopy(buf, sizeof buf, paramStr((enum paramId)id));
  *valueLen = (int)strlen(*value);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetAllParameterKeys, const char ***table, int *tableLen) {
  static _Thread_local const char *keys[paramCount];
  if (table == NULL || tableLen == NULL) {
    WARN("ncclParamGetAllParameterKeys : %s argument is NULL", table == NULL ? "table" : "tableLen");
    return ncclInvalidArgument;
  }
  for (int i = 0; i < paramCount; i++) keys[i] = paramName((enum paramId)i);
  *table = keys;
  *tableLen = paramCount;
  return ncclSuccess;
}

/* Every parameter on stdout, as NCCL's prints its registry (a secret's
 * value left out): chorus-info's table under NCCL's heading. */
NCCL_API(void, ncclParamDumpAll, void) {
  printf("=== ncclParam Registry Dump ===\n");
  paramPrintAll(stdout);
  fflush(stdout);
}
