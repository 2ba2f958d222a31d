/* The host-CUDA shim (include/chorus/host-cuda/cuda_runtime.h): CUDA's
 * semantics on the host. Errors and the last error; device counts from
 * the environment (each in a forked process, since the count is read
 * once); memory and its misuse; copies in stream order; the default stream
 * waiting for cudaStreamCreate's streams and not for non-blocking ones,
 * NCCL calls on stream 0 included; events with times, reuse and
 * cudaStreamWaitEvent's snapshot; device-wide waits; an NCCL failure on a
 * stream reaching the CUDA calls that wait for it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_runtime.h"
#include "chorus.h"
#include "harness.h"

#define CUDAOK(call) EXPECT((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorName(cudaPeekAtLastError()))

static void sleepMs(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* A host function that sleeps, then stores a value. */
struct late {
  int ms;
  volatile int *where;
  int value;
};
static void CUDART_CB lateStore(void *arg) { /* written as CUDA programs write host callbacks */
  struct late *l = arg;
  sleepMs(l->ms);
  __atomic_store_n(l->where, l->value, __ATOMIC_RELEASE);
}

/* A host function that waits (at most 5 s) until *gate is set. */
static void waitGate(void *arg) {
  volatile int *gate = arg;
  for (int i = 0; i < 5000 && !__atomic_load_n(gate, __ATOMIC_ACQUIRE); i++) sleepMs(1);
}

static int errors(void) {
  EXPECT(strcmp(cudaGetErrorString(cudaSuccess), "no error") == 0, "%s", cudaGetErrorString(cudaSuccess));
  EXPECT(strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0, "name");
  EXPECT(strstr(cudaGetErrorString(cudaErrorLaunchFailure), "ncclGetLastError") != NULL, "launch failure text");
  EXPECT(strcmp(cudaGetErrorString((cudaError_t)12345), "unrecognized error code") == 0, "unknown code");
  EXPECT(strcmp(cudaGetErrorName((cudaError_t)12345), "unrecognized error code") == 0, "unknown code's name");
  EXPECT(cudaGetLastError() == cudaSuccess, "no error yet");
  EXPECT(cudaMalloc(NULL, 16) == cudaErrorInvalidValue, "NULL devPtr");
  EXPECT(cudaPeekAtLastError() == cudaErrorInvalidValue, "peek");
  EXPECT(cudaPeekAtLastError() == cudaErrorInvalidValue, "peek does not clear");
  int d;
  CUDAOK(cudaGetDevice(&d)); /* a success leaves the last error alone */
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue, "last error");
  EXPECT(cudaGetLastError() == cudaSuccess, "cleared");
  return 0;
}

/* The count is read once per process: each environment is checked by a
 * fresh process (this program again, "count WANT"). */
static int countIs(int want) {
  int n = -1;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (n != want || (e == cudaSuccess) != (want > 0)) {
    const char *c = getenv("CHORUS_HOST_DEVICES"), *v = getenv("CUDA_VISIBLE_DEVICES");
    fprintf(stderr, "CHORUS_HOST_DEVICES=%s CUDA_VISIBLE_DEVICES=%s: %d devices (%s), expected %d\n",
            c ? c : "(unset)", v ? v : "(unset)", n, cudaGetErrorName(e), want);
    return 1;
  }
  if (want == 0 && cudaSetDevice(0) != cudaErrorNoDevice) return 1;
  /* With no device, ncclCommInitAll fails as NCCL's does when
   * cudaGetDeviceCount fails, devlist or not. */
  ncclComm_t comm = NULL;
  int dev0 = 0;
  if (want == 0 && (ncclCommInitAll(&comm, 1, &dev0) != ncclUnhandledCudaError ||
                    ncclCommInitAll(&comm, 1, NULL) != ncclUnhandledCudaError || comm != NULL)) {
    fprintf(stderr, "ncclCommInitAll with no device did not fail as NCCL's\n");
    return 1;
  }
  return 0;
}

static int devicesUnder(const char *count, const char *visible, int want) {
  pid_t pid = fork();
  if (pid == 0) {
    if (count) setenv("CHORUS_HOST_DEVICES", count, 1);
    if (visible) setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    char wantText[16];
    snprintf(wantText, sizeof wantText, "%d", want);
    execl("/proc/self/exe", "test_hostcuda", "count", wantText, (char *)NULL);
    _exit(127);
  }
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

static void *otherThreadDevice(void *arg) {
  cudaGetDevice(arg);
  return NULL;
}

static int devices(void) {
  EXPECT(devicesUnder(NULL, NULL, 8) == 0, "default count");
  EXPECT(devicesUnder("3", "0,1,2,3,4", 3) == 0, "CHORUS_HOST_DEVICES first");
  EXPECT(devicesUnder(NULL, "2,5", 2) == 0, "CUDA_VISIBLE_DEVICES");
  EXPECT(devicesUnder(NULL, "", 0) == 0, "no visible devices");
  /* As CUDA: the list ends at its first entry that is not a device */
  EXPECT(devicesUnder(NULL, "-1", 0) == 0, "CUDA_VISIBLE_DEVICES=-1 hides every device");
  EXPECT(devicesUnder(NULL, "none", 0) == 0, "CUDA_VISIBLE_DEVICES=none");
  EXPECT(devicesUnder(NULL, "0,-1,1", 1) == 0, "CUDA_VISIBLE_DEVICES=0,-1,1");
  EXPECT(devicesUnder(NULL, "GPU-8c4c7d2e,3", 2) == 0, "CUDA_VISIBLE_DEVICES with a UUID");
  int n;
  CUDAOK(cudaGetDeviceCount(&n));
  EXPECT(cudaSetDevice(n) == cudaErrorInvalidDevice, "device %d of %d", n, n);
  EXPECT(cudaSetDevice(-1) == cudaErrorInvalidDevice, "device -1");
  CUDAOK(cudaSetDevice(n - 1));
  int d = -1, other = -1;
  CUDAOK(cudaGetDevice(&d));
  EXPECT(d == n - 1, "current device %d", d);
  pthread_t t;
  pthread_create(&t, NULL, otherThreadDevice, &other);
  pthread_join(t, NULL);
  EXPECT(other == 0, "a new thread's device is 0, got %d", other);
  struct cudaDeviceProp prop;
  CUDAOK(cudaGetDeviceProperties(&prop, 2));
  EXPECT(prop.pciBusID == 2 && strstr(prop.name, "2") && prop.totalGlobalMem > 0, "properties of device 2: %s",
         prop.name);
  char bus[32];
  CUDAOK(cudaDeviceGetPCIBusId(bus, sizeof bus, 10 % n));
  EXPECT(strlen(bus) == 12, "bus id %s", bus);
  /* A communicator reports the device current when it was made. */
  CUDAOK(cudaSetDevice(3 % n));
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, 1, id, 0));
  int commDev = -1;
  NCCLCHECK(ncclCommCuDevice(comm, &commDev));
  EXPECT(commDev == 3 % n, "ncclCommCuDevice %d after cudaSetDevice(%d)", commDev, 3 % n);
  NCCLCHECK(ncclCommDestroy(comm));
  CUDAOK(cudaSetDevice(0));
  /* ncclCommInitAll takes the shim's devices as NCCL takes CUDA's
   * (init.cc): one past the last is an invalid argument, more ranks than
   * devices with no devlist fail as cudaSetDevice does, and a device twice
   * needs NCCL_MULTI_RANK_GPU_ENABLE=1. A failed call makes nothing. */
  ncclComm_t all[9] = {NULL};
  int pastEnd[2] = {0, n}, twice[2] = {1, 1};
  EXPECT(ncclCommInitAll(all, 2, pastEnd) == ncclInvalidArgument && all[0] == NULL, "devlist {0, %d} of %d devices",
         n, n);
  EXPECT(ncclCommInitAll(all, n + 1, NULL) == ncclUnhandledCudaError && all[0] == NULL,
         "%d ranks with no devlist on %d devices", n + 1, n);
  EXPECT(ncclCommInitAll(all, 2, twice) == ncclInvalidUsage && all[0] == NULL, "devlist {1, 1}");
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
  ncclResult_t shared = ncclCommInitAll(all, 2, twice);
  unsetenv("NCCL_MULTI_RANK_GPU_ENABLE");
  EXPECT(shared == ncclSuccess, "devlist {1, 1} with NCCL_MULTI_RANK_GPU_ENABLE=1: %s", ncclGetErrorString(shared));
  if (shared != ncclSuccess) return 1;
  for (int r = 0; r < 2; r++) {
    NCCLCHECK(ncclCommCuDevice(all[r], &commDev));
    EXPECT(commDev == 1, "rank %d of a shared device reports device %d", r, commDev);
    NCCLCHECK(ncclCommDestroy(all[r]));
  }
  NCCLCHECK(ncclCommInitAll(all, n, NULL)); /* one rank per device fits */
  for (int r = 0; r < n; r++) NCCLCHECK(ncclCommDestroy(all[r]));
  return 0;
}

static int memory(void) {
  void *p, *h, *z = (void *)1;
  CUDAOK(cudaMalloc(&p, 1000));
  EXPECT((uintptr_t)p % 256 == 0, "alignment of %p", p);
  CUDAOK(cudaMalloc(&z, 0));
  EXPECT(z == NULL, "size 0 gives NULL");
  CUDAOK(cudaFree(NULL));
  int onStack;
  EXPECT(cudaFree(&onStack) == cudaErrorInvalidValue, "free of memory not from cudaMalloc");
  CUDAOK(cudaMallocHost(&h, 64));
  EXPECT(cudaFree(h) == cudaErrorInvalidValue, "cudaFree of cudaMallocHost memory");
  EXPECT(cudaFreeHost(p) == cudaErrorInvalidValue, "cudaFreeHost of cudaMalloc memory");
  EXPECT(cudaHostAlloc(&h, 64, 0x80) == cudaErrorInvalidValue, "unknown cudaHostAlloc flag");
  EXPECT(cudaMalloc(&z, SIZE_MAX / 2) == cudaErrorMemoryAllocation, "impossible size");
  memset(p, 0x11, 1000);
  EXPECT(cudaMemcpy(p, h, 8, (enum cudaMemcpyKind)7) == cudaErrorInvalidMemcpyDirection, "bad kind");
  EXPECT(cudaMemcpy(p, NULL, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "NULL src");
  CUDAOK(cudaMemset(p, 0x1ab, 10)); /* the value's low byte, as CUDA */
  EXPECT(((unsigned char *)p)[9] == 0xab && ((unsigned char *)p)[10] == 0x11, "memset");
  CUDAOK(cudaFree(p));
  EXPECT(cudaFree(p) == cudaErrorInvalidValue, "double free");
  CUDAOK(cudaFreeHost(h));
  cudaGetLastError();
  return 0;
}

/* The default stream waits for cudaStreamCreate's streams, not for
 * non-blocking ones; copies on a stream run in its order. */
static int defaultStream(void) {
  cudaStream_t s, free_;
  CUDAOK(cudaStreamCreate(&s));
  CUDAOK(cudaStreamCreateWithFlags(&free_, cudaStreamNonBlocking));
  EXPECT(cudaStreamCreateWithFlags(&free_, 0x40) == cudaErrorInvalidValue, "unknown stream flag");
  int *buf;
  CUDAOK(cudaMalloc((void **)&buf, 2 * sizeof(int)));
  buf[0] = buf[1] = 0;
  struct late l = {60, &buf[0], 42};
  CUDAOK(cudaLaunchHostFunc(s, lateStore, &l));
  int src = 7, out = 0;
  CUDAOK(cudaMemcpyAsync(&buf[1], &src, sizeof src, cudaMemcpyHostToDevice, s));
  EXPECT(cudaStreamQuery(s) == cudaErrorNotReady, "query while a host function sleeps");
  EXPECT(cudaStreamQuery(NULL) == cudaErrorNotReady, "the default stream waits for s");
  CUDAOK(cudaMemcpy(&out, &buf[0], sizeof out, cudaMemcpyDeviceToHost));
  EXPECT(out == 42, "cudaMemcpy on the default stream ran before s's earlier work: %d", out);
  EXPECT(buf[1] == 7, "the stream's copy");

  /* Stream 0 in an NCCL call waits for s as well. */
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitAll(&comm, 1, NULL));
  float *x;
  CUDAOK(cudaMalloc((void **)&x, 1024 * sizeof(float)));
  memset(x, 0, 1024 * sizeof(float));
  float one = 1.0f;
  struct late l2 = {60, (volatile int *)&buf[0], 43};
  CUDAOK(cudaLaunchHostFunc(s, lateStore, &l2));
  CUDAOK(cudaMemcpyAsync(&x[1023], &one, sizeof one, cudaMemcpyHostToDevice, s));
  NCCLCHECK(ncclAllReduce(x, x, 1024, ncclFloat, ncclSum, comm, NULL));
  EXPECT(x[1023] == 1.0f && buf[0] == 43, "ncclAllReduce on stream 0 ran before s's earlier work");
  CUDAOK(cudaFree(x));
  NCCLCHECK(ncclCommDestroy(comm));

  /* A non-blocking stream is not waited for, but synchronizes by itself. */
  int gate = 0;
  CUDAOK(cudaLaunchHostFunc(free_, waitGate, &gate));
  double t0 = nowSec();
  CUDAOK(cudaMemcpy(&out, &buf[1], sizeof out, cudaMemcpyDeviceToHost));
  CUDAOK(cudaStreamSynchronize(NULL));
  EXPECT(nowSec() - t0 < 2.0, "the default stream waited for a non-blocking stream");
  EXPECT(cudaStreamQuery(free_) == cudaErrorNotReady, "non-blocking stream still busy");
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  CUDAOK(cudaStreamSynchronize(free_));
  CUDAOK(cudaStreamQuery(free_));

  /* The special handles are the default stream; they cannot be destroyed. */
  CUDAOK(cudaMemcpyAsync(&out, &src, sizeof src, cudaMemcpyHostToHost, cudaStreamPerThread));
  EXPECT(out == 7, "copy on cudaStreamPerThread is done when it returns");
  CUDAOK(cudaStreamSynchronize(cudaStreamLegacy));
  EXPECT(cudaStreamDestroy(cudaStreamPerThread) == cudaErrorInvalidResourceHandle, "destroy per-thread stream");
  EXPECT(cudaStreamDestroy(NULL) == cudaErrorInvalidResourceHandle, "destroy stream 0");
  CUDAOK(cudaStreamDestroy(s));
  CUDAOK(cudaStreamDestroy(free_));
  CUDAOK(cudaFree(buf));
  cudaGetLastError();
  return 0;
}

static void noteStatus(cudaStream_t stream, cudaError_t status, void *arg) {
  (void)stream;
  *(cudaError_t *)arg = status;
}

static int events(void) {
  cudaStream_t a, b;
  CUDAOK(cudaStreamCreate(&a));
  CUDAOK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, never, untimed;
  CUDAOK(cudaEventCreate(&e0));
  CUDAOK(cudaEventCreate(&e1));
  CUDAOK(cudaEventCreate(&never));
  CUDAOK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  EXPECT(cudaEventCreateWithFlags(&never, 0x100) == cudaErrorInvalidValue, "unknown event flag");
  CUDAOK(cudaEventQuery(never)); /* nothing to wait for */
  volatile int x = 0;
  struct late l = {40, &x, 1};
  CUDAOK(cudaEventRecord(e0, a));
  CUDAOK(cudaLaunchHostFunc(a, lateStore, &l));
  CUDAOK(cudaEventRecord(e1, a));
  CUDAOK(cudaEventRecord(untimed, a));
  float ms = -1;
  EXPECT(cudaEventElapsedTime(&ms, e0, e1) == cudaErrorNotReady || x == 1, "elapsed time before the end");
  CUDAOK(cudaEventSynchronize(e1));
  EXPECT(x == 1, "event passed before the work before it");
  CUDAOK(cudaEventElapsedTime(&ms, e0, e1));
  EXPECT(ms >= 35.0f && ms < 5000.0f, "elapsed %.3f ms over a 40 ms sleep", ms);
  EXPECT(cudaEventElapsedTime(&ms, e0, never) == cudaErrorInvalidResourceHandle, "never recorded");
  EXPECT(cudaEventElapsedTime(&ms, e0, untimed) == cudaErrorInvalidResourceHandle, "timing disabled");
  CUDAOK(cudaEventRecord(e0, NULL)); /* recording again moves it: now, on the default stream */
  CUDAOK(cudaEventElapsedTime(&ms, e1, e0));
  EXPECT(ms >= 0.0f, "re-recorded event is later: %.3f", ms);

  /* cudaStreamWaitEvent waits for the record made before it, not a later
   * one: b waits for x, then a second record of e1 follows work that
   * waits for b. */
  volatile int y = 0, seen = -1;
  int gate = 0;
  struct late l2 = {50, &y, 1};
  CUDAOK(cudaLaunchHostFunc(a, lateStore, &l2));
  CUDAOK(cudaEventRecord(e1, a));
  CUDAOK(cudaStreamWaitEvent(b, e1, 0));
  EXPECT(cudaStreamWaitEvent(b, e1, 7) == cudaErrorInvalidValue, "unknown wait flag");
  CUDAOK(cudaLaunchHostFunc(a, waitGate, &gate));
  CUDAOK(cudaEventRecord(e1, a));
  double t0 = nowSec();
  CUDAOK(cudaStreamSynchronize(b));
  seen = y;
  EXPECT(seen == 1, "b ran on before a reached the event");
  EXPECT(nowSec() - t0 < 3.0, "b waited for the event's later record");
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  cudaError_t status = cudaErrorUnknown;
  CUDAOK(cudaStreamAddCallback(a, noteStatus, &status, 0));
  EXPECT(cudaStreamAddCallback(a, noteStatus, &status, 1) == cudaErrorInvalidValue, "callback flags");
  CUDAOK(cudaStreamSynchronize(a));
  EXPECT(status == cudaSuccess, "callback status %s", cudaGetErrorName(status));
  CUDAOK(cudaEventDestroy(e0));
  CUDAOK(cudaEventDestroy(e1));
  CUDAOK(cudaEventDestroy(never));
  CUDAOK(cudaEventDestroy(untimed));
  CUDAOK(cudaStreamDestroy(a));
  CUDAOK(cudaStreamDestroy(b));
  cudaGetLastError();
  return 0;
}

/* cudaDeviceSynchronize and cudaFree wait for every stream. */
static int deviceWide(void) {
  cudaStream_t s;
  CUDAOK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  volatile int *flag;
  CUDAOK(cudaMalloc((void **)&flag, sizeof *flag));
  *flag = 0;
  struct late l = {40, flag, 1};
  CUDAOK(cudaLaunchHostFunc(s, lateStore, &l));
  CUDAOK(cudaDeviceSynchronize());
  EXPECT(*flag == 1, "cudaDeviceSynchronize returned before a stream's work");
  volatile int done = 0;
  struct late l2 = {40, &done, 1};
  CUDAOK(cudaLaunchHostFunc(s, lateStore, &l2));
  CUDAOK(cudaFree((void *)flag));
  EXPECT(done == 1, "cudaFree freed while a stream's work was pending");
  CUDAOK(cudaStreamDestroy(s));
  return 0;
}

/* An NCCL operation that fails on a stream: cudaStreamSynchronize says
 * so (and cudaDeviceSynchronize, while the stream holds the error); a copy
 * on the default stream still copies (an NCCL failure is no CUDA error). */
static int failure(void) {
  ncclComm_t comms[2];
  NCCLCHECK(ncclCommInitAll(comms, 2, NULL));
  NCCLCHECK(chorusCommSetTimeout(comms[0], 300));
  cudaStream_t s;
  CUDAOK(cudaStreamCreate(&s));
  float *x;
  CUDAOK(cudaMalloc((void **)&x, 64 * sizeof(float)));
  /* Rank 1 never joins: rank 0's AllReduce times out. */
  NCCLCHECK(ncclAllReduce(x, x, 64, ncclFloat, ncclSum, comms[0], s));
  /* An event recorded after it reports the failure, as CUDA's after a
   * failed kernel (before: cudaSuccess). */
  cudaEvent_t after;
  CUDAOK(cudaEventCreate(&after));
  CUDAOK(cudaEventRecord(after, s));
  EXPECT(cudaEventSynchronize(after) == cudaErrorLaunchFailure, "cudaEventSynchronize after the failed operation");
  EXPECT(cudaEventQuery(after) == cudaErrorLaunchFailure, "cudaEventQuery after the failed operation");
  CUDAOK(cudaEventDestroy(after));
  cudaGetLastError();
  float out = -1;
  x[0] = 5;
  CUDAOK(cudaMemcpy(&out, x, sizeof out, cudaMemcpyDeviceToHost)); /* waits for s, then copies */
  EXPECT(out == 5, "the copy after a failed operation gave %g", out);
  EXPECT(cudaDeviceSynchronize() == cudaErrorLaunchFailure, "cudaDeviceSynchronize while s holds the error");
  EXPECT(cudaGetLastError() == cudaErrorLaunchFailure, "last error");
  EXPECT(cudaStreamSynchronize(s) == cudaErrorLaunchFailure, "cudaStreamSynchronize of the failed stream");
  CUDAOK(cudaDeviceSynchronize()); /* the stream's sync took the error */
  ncclResult_t async;
  NCCLCHECK(ncclCommGetAsyncError(comms[0], &async));
  EXPECT(async != ncclSuccess, "the communicator's error");
  ncclCommAbort(comms[0]);
  ncclCommAbort(comms[1]);
  CUDAOK(cudaStreamDestroy(s));
  CUDAOK(cudaFree(x));
  cudaGetLastError();
  return 0;
}

/* cudaFree waits for the streams of the device the memory was allocated
 * on, whichever device is current (before: only the current one's, and a
 * fill queued on device 1 wrote into freed memory). */
static volatile int slowDone;
static void slowHostFn(void *arg) {
  (void)arg;
  usleep(200 * 1000);
  slowDone = 1;
}
static int freeOtherDevice(void) {
  CUDAOK(cudaSetDevice(1));
  cudaStream_t s;
  CUDAOK(cudaStreamCreate(&s));
  char *p;
  CUDAOK(cudaMalloc((void **)&p, 1 << 20));
  slowDone = 0;
  CUDAOK(cudaLaunchHostFunc(s, slowHostFn, NULL));
  CUDAOK(cudaMemsetAsync(p, 7, 1 << 20, s));
  CUDAOK(cudaSetDevice(0));
  CUDAOK(cudaFree(p));
  EXPECT(slowDone, "cudaFree on device 0 returned before device 1's stream finished with the memory");
  int dev = -1;
  CUDAOK(cudaGetDevice(&dev));
  EXPECT(dev == 0, "cudaFree changed the current device to %d", dev);
  CUDAOK(cudaSetDevice(1));
  CUDAOK(cudaStreamDestroy(s));
  CUDAOK(cudaSetDevice(0));
  return 0;
}

/* cudaMemcpyAsync from and to pageable memory (what the shim did not
 * allocate) on a stream, as CUDA's: the source is taken at the call, the
 * destination written before the call returns, after the stream's earlier
 * work (before: both ran later, in the stream's order). */
static int pageable(void) {
  cudaStream_t s;
  CUDAOK(cudaStreamCreate(&s));
  int *d, *pinned;
  CUDAOK(cudaMalloc((void **)&d, 4 * sizeof(int)));
  CUDAOK(cudaMallocHost((void **)&pinned, 4 * sizeof(int)));
  int src[4] = {7, 7, 7, 7}, dst[4] = {0, 0, 0, 0};
  slowDone = 0;
  CUDAOK(cudaLaunchHostFunc(s, slowHostFn, NULL));
  CUDAOK(cudaMemcpyAsync(d, src, sizeof src, cudaMemcpyHostToDevice, s));
  src[0] = -1; /* the copy took 7 */
  CUDAOK(cudaMemcpyAsync(dst, d, sizeof dst, cudaMemcpyDeviceToHost, s));
  EXPECT(slowDone, "a copy into pageable memory returned before the stream's earlier work ran");
  EXPECT(dst[0] == 7 && dst[3] == 7, "pageable copies gave %d %d", dst[0], dst[3]);
  int bogus[8];
  EXPECT(cudaMemcpyAsync(dst, d, sizeof dst, cudaMemcpyDeviceToHost, (cudaStream_t)bogus) ==
             cudaErrorInvalidResourceHandle,
         "a pageable copy on a stream that is none");
  cudaGetLastError();
  /* Page-locked memory stays asynchronous, in the stream's order. */
  slowDone = 0;
  CUDAOK(cudaLaunchHostFunc(s, slowHostFn, NULL));
  CUDAOK(cudaMemcpyAsync(pinned, d, sizeof dst, cudaMemcpyDeviceToHost, s));
  EXPECT(!slowDone, "a copy into page-locked memory waited for the stream");
  CUDAOK(cudaStreamSynchronize(s));
  EXPECT(pinned[0] == 7, "the page-locked copy gave %d", pinned[0]);
  CUDAOK(cudaStreamDestroy(s));
  CUDAOK(cudaFree(d));
  CUDAOK(cudaFreeHost(pinned));
  return 0;
}

/* One thread per device, each with a cudaStreamCreate stream: rank 1's
 * AllReduce is queued first, then rank 0 allocates, copies and frees on the
 * default stream before its own. The default stream's waits are rank 0's
 * device's alone (rank 1's work waits for rank 0), so nothing waits out the
 * timeout. */
static ncclComm_t pairComms[2];
static int pairResult[2];
static void *pairRank(void *arg) {
  int r = (int)(intptr_t)arg;
  cudaSetDevice(r);
  cudaStream_t s;
  float *buf, *tmp, host[1024];
  for (int i = 0; i < 1024; i++) host[i] = (float)(r + 1);
  if (cudaStreamCreate(&s) != cudaSuccess || cudaMalloc((void **)&buf, sizeof host) != cudaSuccess) return NULL;
  if (r == 0) sleepMs(100); /* rank 1's AllReduce is queued by then */
  if (cudaMalloc((void **)&tmp, 64) != cudaSuccess || cudaMemcpy(buf, host, sizeof host, cudaMemcpyHostToDevice) ||
      cudaFree(tmp) != cudaSuccess)
    return NULL;
  if (ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, pairComms[r], s) != ncclSuccess) return NULL;
  if (cudaStreamSynchronize(s) != cudaSuccess || cudaMemcpy(host, buf, sizeof host, cudaMemcpyDeviceToHost)) return NULL;
  pairResult[r] = host[0] == 3.0f && host[1023] == 3.0f;
  cudaStreamDestroy(s);
  cudaFree(buf);
  return NULL;
}

static int threadPerDevice(void) {
  NCCLCHECK(ncclCommInitAll(pairComms, 2, NULL));
  for (int r = 0; r < 2; r++) NCCLCHECK(chorusCommSetTimeout(pairComms[r], 3000));
  double t0 = nowSec();
  pthread_t t[2];
  for (intptr_t r = 0; r < 2; r++) pthread_create(&t[r], NULL, pairRank, (void *)r);
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  EXPECT(pairResult[0] && pairResult[1], "thread per device: ranks %d %d, %.1f s", pairResult[0], pairResult[1],
         nowSec() - t0);
  EXPECT(nowSec() - t0 < 2.0, "thread per device took %.1f s", nowSec() - t0);

  /* One thread, one group: rank 0 on a cudaStreamCreate stream, rank 1 on
   * the default stream. Rank 1's part waits for what came before on its
   * device, not for the group's own stream work. */
  cudaSetDevice(0);
  cudaStream_t s;
  CUDAOK(cudaStreamCreate(&s));
  float a[64], b[64];
  for (int i = 0; i < 64; i++) a[i] = 1, b[i] = 2;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(a, a, 64, ncclFloat, ncclSum, pairComms[0], s));
  NCCLCHECK(ncclAllReduce(b, b, 64, ncclFloat, ncclSum, pairComms[1], NULL));
  NCCLCHECK(ncclGroupEnd());
  CUDAOK(cudaStreamSynchronize(s));
  EXPECT(a[63] == 3 && b[0] == 3, "mixed group gave %g %g", a[63], b[0]);
  CUDAOK(cudaStreamDestroy(s));
  for (int r = 0; r < 2; r++) NCCLCHECK(ncclCommDestroy(pairComms[r]));
  return 0;
}

/* A stream being destroyed is still waited for by the device's waits. */
static void *destroyStream(void *s) {
  cudaStreamDestroy(s);
  return NULL;
}

static int destroyWhilePending(void) {
  cudaStream_t s;
  CUDAOK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  volatile int done = 0;
  struct late l = {150, &done, 1};
  CUDAOK(cudaLaunchHostFunc(s, lateStore, &l));
  pthread_t t;
  pthread_create(&t, NULL, destroyStream, s);
  sleepMs(30);
  CUDAOK(cudaDeviceSynchronize());
  EXPECT(done == 1, "cudaDeviceSynchronize passed over a stream being destroyed");
  pthread_join(t, NULL);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "count") == 0) return countIs(atoi(argv[2]));
  unsetenv("CHORUS_HOST_DEVICES");
  unsetenv("CUDA_VISIBLE_DEVICES");
  struct {
    const char *name;
    int (*fn)(void);
  } cases[] = {{"errors", errors}, {"devices", devices}, {"memory", memory}, {"default stream", defaultStream},
               {"events", events}, {"device-wide waits", deviceWide}, {"failure", failure},
               {"thread per device", threadPerDevice}, {"destroy while pending", destroyWhilePending},
               {"free on another device", freeOtherDevice}, {"pageable copies", pageable}};
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int bad = cases[i].fn();
    printf("%s: %s\n", cases[i].name, bad ? "FAILED" : "ok");
    fflush(stdout);
    /* Fail fast: a failed case may leave host functions pending that point
     * into its stack frame. */
    if (bad) _exit(1);
    failed |= bad;
  }
  return failed;
}
