/* ncclResetDebugInit: logging starts again from NCCL_DEBUG, NCCL_DEBUG_FILE
 * as the environment has them then. A process with logging off turns it on
 * (a WARN lands in the new file), then off again (nothing more lands). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

int main(void) {
  char dir[64];
  if (tempDir(dir, "logreset") != 0) return 1;
  char pattern[128], first[128], second[128];
  snprintf(pattern, sizeof pattern, "%s/log.%%p", dir);
  snprintf(first, sizeof first, "%s/log.%d", dir, (int)getpid());
  const char *warn = "uniqueId argument is NULL";
  int failed = 0;
  unsetenv("NCCL_DEBUG");
  setenv("NCCL_DEBUG_FILE", pattern, 1);
  EXPECT(ncclGetUniqueId(NULL) == ncclInvalidArgument, "ncclGetUniqueId(NULL) succeeded");
  EXPECT(fileLinesWith(first, warn) <= 0, "a WARN was logged with NCCL_DEBUG unset");

  snprintf(pattern, sizeof pattern, "%s/second.%%p", dir);
  snprintf(second, sizeof second, "%s/second.%d", dir, (int)getpid());
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", pattern, 1);
  ncclResetDebugInit();
  EXPECT(ncclGetUniqueId(NULL) == ncclInvalidArgument, "ncclGetUniqueId(NULL) succeeded");
  EXPECT(fileLinesWith(second, warn) == 1, "after NCCL_DEBUG=WARN and a reset, %s has %d WARN line(s)", second,
         fileLinesWith(second, warn));

  setenv("NCCL_DEBUG", "NONE", 1);
  ncclResetDebugInit();
  EXPECT(ncclGetUniqueId(NULL) == ncclInvalidArgument, "ncclGetUniqueId(NULL) succeeded");
  EXPECT(fileLinesWith(second, warn) == 1, "after NCCL_DEBUG=NONE and a reset, %s has %d WARN line(s)", second,
         fileLinesWith(second, warn));
  EXPECT(strstr(ncclGetLastError(NULL), warn), "the last error is still kept: '%s'", ncclGetLastError(NULL));
  printf("test_logreset: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
