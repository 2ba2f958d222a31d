/* The host-CUDA shim's driver part: the few CUDA driver calls that tools
 * built for NCCL open libcuda.so.1 for (NCCL's inspector profiler plugin
 * asks each device's UUID), answered for the shim's host devices. It is
 * libcuda.so.1 in a directory of its own (lib/chorus-cuda), used only by
 * programs started with LD_LIBRARY_PATH pointing there, so it never
 * shadows a real driver. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda_runtime_api.h"

typedef int CUresult; /* CUDA's values: */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
typedef int CUdevice;
typedef struct {
  char bytes[16];
} CUuuid;

#define EXPORT __attribute__((visibility("default")))

/* The shim's device count (device.c). Not cudaGetDeviceCount or any cuda*
 * name: a program linked with the real CUDA runtime binds those to it, and
 * the runtime calls this library back. */
int chorusHostCudaDevices(void);

EXPORT CUresult cuInit(unsigned int flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

EXPORT CUresult cuDriverGetVersion(int *version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDART_VERSION;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = chorusHostCudaDevices();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  int n = chorusHostCudaDevices();
  if (n == 0) return CUDA_ERROR_NO_DEVICE;
  if (ordinal < 0 || ordinal >= n) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

/* A UUID per host and device: the host name's hash and the device number,
 * so ranks on one host agree on it and hosts differ. */
EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= chorusHostCudaDevices()) return CUDA_ERROR_INVALID_DEVICE;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  memcpy(uuid->bytes, &h, 8);
  uint64_t d = 0x63686f7275730000ull | (uint64_t)(uint32_t)device; /* "chorus" and the device */
  memcpy(uuid->bytes + 8, &d, 8);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) { return cuDeviceGetUuid(uuid, device); }

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice device) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= chorusHostCudaDevices()) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "chorus host device %d", device);
  return CUDA_SUCCESS;
}

static const char *errorName(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    default: return NULL;
  }
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  *str = errorName(error);
  return *str ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **str) {
  static const char *const text[] = {"no error", "invalid argument", "no CUDA-capable device is detected",
                                     "invalid device ordinal"};
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  int k = error == CUDA_SUCCESS ? 0 : error == CUDA_ERROR_INVALID_VALUE ? 1 : error == CUDA_ERROR_NO_DEVICE ? 2
        : error == CUDA_ERROR_INVALID_DEVICE ? 3 : -1;
  *str = k >= 0 ? text[k] : NULL;
  return k >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
