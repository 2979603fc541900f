/*
 * softnpu management interface: what npu-smi needs, the counterpart of Ascend's DCMI.
 *
 * Unlike runtime.h it does not create devices or threads: it reads the configuration (ignoring
 * ASCEND_RT_VISIBLE_DEVICES, since management tools see physical devices) and the statistics that every process
 * using the runtime publishes in shared memory (readable only by the same user). All calls are SYNC and return
 * snpuError_t; snpuGetLastErrorMessage() explains failures.
 */
#ifndef SOFTNPU_MANAGEMENT_H
#define SOFTNPU_MANAGEMENT_H

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of physical devices (SOFTNPU_DEVICE_COUNT). */
SNPU_API snpuError_t snpuMgmtGetDeviceCount(int* count);
/* Properties of a physical device (physical_index == device). */
SNPU_API snpuError_t snpuMgmtGetDeviceProperties(snpuDeviceProp* prop, int device);

/* One process's use of one physical device. */
typedef struct snpuMgmtProcessUsage {
  int pid;
  char process_name[64];
  int device;                 /* physical index */
  uint64_t memory_in_use;     /* bytes */
  uint64_t memory_peak;       /* bytes */
  uint64_t busy_ns;           /* cumulative busy time of the device's compute threads in that process */
  uint64_t kernels_launched;
  int compute_threads;        /* compute threads of the device in that process (for utilization) */
  int64_t sample_ns;          /* CLOCK_MONOTONIC time the entry was read */
} snpuMgmtProcessUsage;

/* Reads every live process's published usage, one entry per (process, device it touched). Entries left by dead
 * processes are skipped and removed. Fills up to capacity entries; *count receives the number available (which
 * may exceed capacity). */
SNPU_API snpuError_t snpuMgmtListProcessUsage(snpuMgmtProcessUsage* out, size_t capacity, size_t* count);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_MANAGEMENT_H */
