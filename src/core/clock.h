#ifndef CHORUS_CORE_CLOCK_H
#define CHORUS_CORE_CLOCK_H
#include <stdint.h>
#include <time.h>

static inline uint64_t clockNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same clock to the kernel's tick (a few ms), read in a fifth of the
 * time: for what needs no finer (the flight recorder). */
static inline uint64_t clockCoarseNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A counter for comparing two short stretches of one thread's work (the
 * time stamp counter on x86-64, the clock elsewhere): its unit is the
 * machine's, so only ratios of its differences mean anything. */
static inline uint64_t clockCycles(void) {
#if defined(__x86_64__)
  return __builtin_ia32_rdtsc();
#else
  return clockNs();
#endif
}

static inline void cpuRelax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
#endif
