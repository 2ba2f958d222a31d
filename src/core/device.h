/* The calling thread's device (chorusSetDevice): what CUDA's current device
 * is to NCCL. Communicators made on the thread report it, and streams belong
 * to the device that was current when they were made, so the NULL stream's
 * waits (engine/stream.h) cover one device's streams, as CUDA's do. */
#ifndef CHORUS_CORE_DEVICE_H
#define CHORUS_CORE_DEVICE_H

extern _Thread_local int deviceCurrentValue;
static inline int deviceCurrent(void) { return deviceCurrentValue; }
static inline void deviceSetCurrent(int device) { deviceCurrentValue = device; }

#endif
