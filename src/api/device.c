/* chorusSetDevice / chorusGetDevice (chorus.h): the calling thread's
 * device (core/device.h). */
#include "chorus.h"
#include "core/device.h"
#include "core/log.h"

_Thread_local int deviceCurrentValue;

ncclResult_t chorusSetDevice(int device) {
  if (device < 0) {
    WARN("chorusSetDevice : invalid device %d", device);
    return ncclInvalidArgument;
  }
  deviceSetCurrent(device);
  return ncclSuccess;
}

ncclResult_t chorusGetDevice(int *device) {
  if (device == NULL) {
    WARN("chorusGetDevice : device argument is NULL");
    return ncclInvalidArgument;
  }
  *device = deviceCurrent();
  return ncclSuccess;
}
