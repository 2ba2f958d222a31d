/* The calling thread's device (chorusSetDevice in chorus.h): what CUDA's
 * current device is to NCCL, the device a communicator made on this thread
 * reports. */
#include "chorus.h"
#include "core/log.h"

static _Thread_local int currentDevice;

ncclResult_t chorusSetDevice(int device) {
  if (device < 0) {
    WARN("chorusSetDevice : invalid device %d", device);
    return ncclInvalidArgument;
  }
  currentDevice = device;
  return ncclSuccess;
}

ncclResult_t chorusGetDevice(int *device) {
  if (device == NULL) {
    WARN("chorusGetDevice : device argument is NULL");
    return ncclInvalidArgument;
  }
  *device = currentDevice;
  return ncclSuccess;
}
