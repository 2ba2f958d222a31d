/* The host-CUDA shim's driver part (lib/chorus-cuda/libcuda.so.1): opened
 * as tools built for NCCL open the driver, with dlopen("libcuda.so.1")
 * through LD_LIBRARY_PATH. With CHORUS_HOST_DEVICES=3 it must count 3
 * devices, refuse the 4th, give each a UUID of its own (the same on every
 * call) and name its errors. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char bytes[16];
} uuid_t16;

#define FAIL(...)                \
  do {                           \
    fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n");       \
    return 1;                    \
  } while (0)

/* What a program linked with the real CUDA runtime has first in its scope:
 * the runtime's cuda* names (this program exports its own, -rdynamic). The
 * driver part must not call them: the real runtime calls the driver back,
 * and the process waited for itself forever. */
__attribute__((visibility("default"))) int cudaGetDeviceCount(int *count) {
  *count = 42;
  return 0;
}
__attribute__((visibility("default"))) int cudaDriverGetVersion(int *version) {
  *version = -42;
  return 0;
}

int main(void) {
  setenv("CHORUS_HOST_DEVICES", "3", 1);
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) FAIL("dlopen(libcuda.so.1): %s (LD_LIBRARY_PATH must name lib/chorus-cuda)", dlerror());
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
  int (*count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
  int (*get)(int *, int) = (int (*)(int *, int))dlsym(lib, "cuDeviceGet");
  int (*uuid)(uuid_t16 *, int) = (int (*)(uuid_t16 *, int))dlsym(lib, "cuDeviceGetUuid");
  int (*errstr)(int, const char **) = (int (*)(int, const char **))dlsym(lib, "cuGetErrorString");
  int (*version)(int *) = (int (*)(int *))dlsym(lib, "cuDriverGetVersion");
  if (!init || !count || !get || !uuid || !errstr || !version) FAIL("a driver call is missing");
  int n = -1, d = -1, v = 0;
  if (init(0) != 0 || count(&n) != 0 || n != 3) FAIL("cuDeviceGetCount says %d, want 3", n);
  if (get(&d, 2) != 0 || d != 2) FAIL("cuDeviceGet(2) gave %d", d);
  if (get(&d, 3) != 101) FAIL("cuDeviceGet(3) of 3 devices is not CUDA_ERROR_INVALID_DEVICE");
  if (version(&v) != 0 || v <= 0) FAIL("cuDriverGetVersion: %d", v);
  uuid_t16 u[3], again;
  for (int i = 0; i < 3; i++)
    if (uuid(&u[i], i) != 0) FAIL("cuDeviceGetUuid(%d) failed", i);
  if (uuid(&again, 1) != 0 || memcmp(&again, &u[1], sizeof again) != 0) FAIL("device 1's UUID changed");
  if (!memcmp(&u[0], &u[1], sizeof u[0]) || !memcmp(&u[1], &u[2], sizeof u[0])) FAIL("two devices share a UUID");
  if (uuid(&again, 3) != 101) FAIL("a UUID for a device that does not exist");
  const char *s = NULL;
  if (errstr(101, &s) != 0 || !s || !strstr(s, "device")) FAIL("cuGetErrorString(101): %s", s ? s : "(null)");
  printf("host driver: 3 devices, distinct stable UUIDs, errors named\n");
  return 0;
}
