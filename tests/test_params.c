/* NCCL 2.30's parameter API (ncclParamBind, ncclParamGet*, ...) over
 * chorus's table, with the environment set before anything reads it:
 * numbers in every integer type they fit (and refused where they do not),
 * text as a string and as bytes, keys with or without "NCCL_", the key
 * list, unknown keys refused, and ncclParamDumpAll's listing without a
 * secret's value. */
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "harness.h"

int main(void) {
  char dir[64], pattern[128], log[128];
  if (tempDir(dir, "params") != 0) return 1;
  snprintf(pattern, sizeof pattern, "%s/log.%%p", dir);
  snprintf(log, sizeof log, "%s/log.%d", dir, (int)getpid());
  setenv("NCCL_BUFFSIZE", "65536", 1);
  setenv("NCCL_ALGO", "ring", 1);
  setenv("CHORUS_SMALL_THRESHOLD", "-1", 1);
  setenv("CHORUS_SECRET", "hunter2", 1);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "ENV", 1);
  setenv("NCCL_DEBUG_FILE", pattern, 1);

  ncclParamHandle_t buff, bare, algo, small;
  NCCLCHECK(ncclParamBind(&buff, "NCCL_BUFFSIZE"));
  NCCLCHECK(ncclParamBind(&bare, "BUFFSIZE"));
  EXPECT(buff == bare, "NCCL_BUFFSIZE and BUFFSIZE gave different handles");
  int64_t i64 = 0;
  int32_t i32 = 0;
  int16_t i16 = 0;
  uint8_t u8 = 0;
  uint64_t u64 = 0;
  NCCLCHECK(ncclParamGetI64(buff, &i64));
  NCCLCHECK(ncclParamGetI32(buff, &i32));
  NCCLCHECK(ncclParamGetU64(buff, &u64));
  EXPECT(i64 == 65536 && i32 == 65536 && u64 == 65536, "NCCL_BUFFSIZE read %lld %d %llu", (long long)i64, i32,
         (unsigned long long)u64);
  EXPECT(ncclParamGetI16(buff, &i16) == ncclInvalidArgument && i16 == 0, "65536 went into an int16");
  EXPECT(strstr(ncclGetLastError(NULL), "cannot hold"), "last error '%s'", ncclGetLastError(NULL));
  EXPECT(ncclParamGetU8(buff, &u8) == ncclInvalidArgument, "65536 went into a uint8");
  const char *s = NULL;
  NCCLCHECK(ncclParamGetStr(buff, &s));
  EXPECT(strcmp(s, "65536") == 0, "NCCL_BUFFSIZE as text: '%s'", s);

  NCCLCHECK(ncclParamBind(&small, "CHORUS_SMALL_THRESHOLD"));
  int8_t i8 = 0;
  uint32_t u32 = 7;
  NCCLCHECK(ncclParamGetI8(small, &i8));
  EXPECT(i8 == -1, "CHORUS_SMALL_THRESHOLD=-1 read %d", i8);
  EXPECT(ncclParamGetU32(small, &u32) == ncclInvalidArgument && u32 == 7, "-1 went into a uint32");

  NCCLCHECK(ncclParamBind(&algo, "NCCL_ALGO"));
  EXPECT(ncclParamGetI32(algo, &i32) == ncclInvalidArgument, "NCCL_ALGO read as a number");
  EXPECT(strstr(ncclGetLastError(NULL), "text"), "last error '%s'", ncclGetLastError(NULL));
  NCCLCHECK(ncclParamGetStr(algo, &s));
  EXPECT(strcmp(s, "ring") == 0, "NCCL_ALGO: '%s'", s);
  char bytes[16];
  int len = 0;
  EXPECT(ncclParamGet(algo, bytes, 3, &len) == ncclInvalidArgument && len == 5, "3 bytes for 'ring': len %d", len);
  NCCLCHECK(ncclParamGet(algo, bytes, sizeof bytes, &len));
  EXPECT(len == 5 && memcmp(bytes, "ring", 5) == 0, "ncclParamGet of NCCL_ALGO: %d bytes", len);
  NCCLCHECK(ncclParamGet(buff, bytes, sizeof bytes, &len));
  memcpy(&i64, bytes, sizeof i64);
  EXPECT(len == 8 && i64 == 65536, "ncclParamGet of NCCL_BUFFSIZE: %d bytes, %lld", len, (long long)i64);

  int vlen = -1;
  NCCLCHECK(ncclParamGetParameter("CHORUS_SMALL_THRESHOLD", &s, &vlen));
  EXPECT(strcmp(s, "-1") == 0 && vlen == 2, "CHORUS_SMALL_THRESHOLD by key: '%s' (%d)", s, vlen);
  ncclParamHandle_t none = NULL;
  EXPECT(ncclParamBind(&none, "NCCL_NO_SUCH_THING") == ncclInvalidArgument && none == NULL, "an unknown key bound");
  EXPECT(strstr(ncclGetLastError(NULL), "no parameter called NCCL_NO_SUCH_THING"), "last error '%s'",
         ncclGetLastError(NULL));
  EXPECT(ncclParamGetParameter("NCCL_NO_SUCH_THING", &s, &vlen) == ncclInvalidArgument && s == NULL && vlen == 0,
         "an unknown key read (NCCL: NULL and 0 out)");
  EXPECT(ncclParamGetI64(NULL, &i64) == ncclInvalidArgument, "a NULL handle read");

  const char **keys = NULL;
  int nkeys = 0, sawBuff = 0, sawTimeout = 0;
  NCCLCHECK(ncclParamGetAllParameterKeys(&keys, &nkeys));
  for (int i = 0; i < nkeys; i++) {
    sawBuff += strcmp(keys[i], "NCCL_BUFFSIZE") == 0;
    sawTimeout += strcmp(keys[i], "CHORUS_TIMEOUT") == 0;
    ncclParamHandle_t h;
    EXPECT(ncclParamBind(&h, keys[i]) == ncclSuccess, "key %s from the list does not bind", keys[i]);
  }
  EXPECT(nkeys > 20 && sawBuff == 1 && sawTimeout == 1, "%d keys, NCCL_BUFFSIZE %d times, CHORUS_TIMEOUT %d times",
         nkeys, sawBuff, sawTimeout);

  /* on stdout, as NCCL's */
  char dumped[128];
  snprintf(dumped, sizeof dumped, "%s/dump", dir);
  fflush(stdout);
  int saved = dup(1), to = open(dumped, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  EXPECT(saved >= 0 && to >= 0 && dup2(to, 1) == 1, "redirecting stdout to %s", dumped);
  ncclParamDumpAll();
  dup2(saved, 1);
  close(to);
  close(saved);
  EXPECT(fileLinesWith(dumped, "=== ncclParam Registry Dump ===") == 1, "ncclParamDumpAll's heading in %s", dumped);
  EXPECT(0 < fileLinesWith(dumped, "= 65536        (default 4194304)"), "ncclParamDumpAll did not print NCCL_BUFFSIZE's value in %s", dumped);
  EXPECT(0 < fileLinesWith(dumped, "CHORUS_SECRET") && fileLinesWith(dumped, "hunter2") <= 0,
         "ncclParamDumpAll and the secret (%s)", dumped);
  EXPECT(fileLinesWith(log, "hunter2") <= 0, "the secret in the log %s", log);
  printf("test_params: passed\n");
  return 0;
}
