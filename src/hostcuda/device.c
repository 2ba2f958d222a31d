/* The shim's devices: numbers, one per rank as NCCL programs pick them
 * (the current one is chorus's, chorusSetDevice); their properties
 * describe the host. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "hostcuda/hostcuda.h"

#define DEFAULT_DEVICES 8 /* a node's worth of GPUs, as NCCL programs expect */

static int deviceCount;
static pthread_once_t countOnce = PTHREAD_ONCE_INIT;

/* CHORUS_HOST_DEVICES, else one device per entry of CUDA_VISIBLE_DEVICES
 * (as CUDA counts them), else DEFAULT_DEVICES. */
static void countDevices(void) {
  const char *n = getenv("CHORUS_HOST_DEVICES");
  const char *visible = getenv("CUDA_VISIBLE_DEVICES");
  if (n && *n) {
    char *end;
    long v = strtol(n, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 4096) {
      deviceCount = (int)v;
      return;
    }
    fprintf(stderr, "chorus-hostcuda: CHORUS_HOST_DEVICES=%s is not a count from 0 to 4096: using %d\n", n,
            DEFAULT_DEVICES);
  } else if (visible) {
    /* As CUDA reads it: entries up to the first that is not a device (a
     * number from 0, or a GPU-/MIG- UUID), so "-1", "none" and "" hide
     * every device, and "0,-1,1" shows one. */
    int entries = 0;
    for (const char *p = visible;; entries++) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      size_t digits = strspn(p, "0123456789");
      int uuid = (len > 4 && (!strncmp(p, "GPU-", 4) || !strncmp(p, "MIG-", 4)));
      if (!uuid && (len == 0 || digits != len)) break;
      if (!comma) {
        entries++;
        break;
      }
      p = comma + 1;
    }
    deviceCount = entries;
    return;
  }
  deviceCount = DEFAULT_DEVICES;
}

static int devices(void) {
  pthread_once(&countOnce, countDevices);
  return deviceCount;
}

/* The count for the shim's driver part (libcuda.so.1), which may not call
 * cudaGetDeviceCount: in a program linked with the real CUDA runtime that
 * name is the runtime's, which calls back into libcuda (and waited for
 * itself forever). */
__attribute__((visibility("default"))) int chorusHostCudaDevices(void) { return devices(); }

cudaError_t cudaGetDeviceCount(int *count) {
  if (count == NULL) return hcReturn(cudaErrorInvalidValue);
  *count = devices();
  return *count == 0 ? hcReturn(cudaErrorNoDevice) : cudaSuccess;
}

static cudaError_t checkDevice(int device) {
  if (devices() == 0) return hcReturn(cudaErrorNoDevice);
  return device < 0 || device >= devices() ? hcReturn(cudaErrorInvalidDevice) : cudaSuccess;
}

/* The current device is chorus's (chorusSetDevice): the communicators a
 * thread creates report it, as NCCL's report cudaGetDevice's. */
cudaError_t cudaSetDevice(int device) {
  cudaError_t e = checkDevice(device);
  if (e == cudaSuccess) chorusSetDevice(device);
  return e;
}

cudaError_t cudaGetDevice(int *device) {
  if (device == NULL) return hcReturn(cudaErrorInvalidValue);
  if (devices() == 0) return hcReturn(cudaErrorNoDevice);
  chorusGetDevice(device);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (prop == NULL) return hcReturn(cudaErrorInvalidValue);
  cudaError_t e = checkDevice(device);
  if (e != cudaSuccess) return e;
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "chorus host device %d", device);
  struct sysinfo si;
  if (sysinfo(&si) == 0) prop->totalGlobalMem = (size_t)si.totalram * si.mem_unit;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  prop->multiProcessorCount = cpus > 0 ? (int)cpus : 1;
  prop->pciBusID = device; /* what tells devices apart in nccl-tests' "device D [0xBB]" lines */
  prop->unifiedAddressing = 1;
  prop->managedMemory = 1;
  prop->canMapHostMemory = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  if (pciBusId == NULL || len <= 0) return hcReturn(cudaErrorInvalidValue);
  cudaError_t e = checkDevice(device);
  if (e != cudaSuccess) return e;
  snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", device);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return hcStreamError(chorusDeviceSynchronize()); }

/* Nothing of a device to reset on the host: its work is finished first. */
cudaError_t cudaDeviceReset(void) { return cudaDeviceSynchronize(); }

cudaError_t cudaDriverGetVersion(int *version) {
  if (version == NULL) return hcReturn(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version) { return cudaDriverGetVersion(version); }

cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  if (free == NULL || total == NULL) return hcReturn(cudaErrorInvalidValue);
  struct sysinfo si;
  if (sysinfo(&si) != 0) return hcReturn(cudaErrorUnknown);
  *free = (size_t)si.freeram * si.mem_unit;
  *total = (size_t)si.totalram * si.mem_unit;
  return cudaSuccess;
}
