// Faults on demand (snpuFaultInject): the chip's failures, entering where the real ones do. A kernel error, a UCE read
// by a copy and the device's stop/hang act where a task executes (Device::execute asks intercept() first), a UCE read by
// a kernel where the kernel checks the memory it touches (range_has_uce: device code knows its operands); an
// out-of-memory acts in snpuMalloc; a slow device delays each kernel. snpuDeviceStop / snpuDeviceRestart are the
// recovery side: a stop aborts every task (running hangs included) with ACL's task-abort code until a restart, which
// also repairs the device's memory (its UCE ranges go) and drops the errors its streams kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "errors.h"
#include "softnpu/runtime.h"
#include "stream.h"

namespace softnpu::rt {

class Device;

snpuError_t inject_fault(const snpuFault& fault);
void clear_faults();

// Before a task runs on d: true if it must fail instead (*error filled). May block (a hang) or delay (slow).
bool intercept(Device* d, Stream* s, const Task& task, KernelError* error);

// snpuMalloc on the device: true if an injected out-of-memory makes this allocation fail.
bool malloc_fails(int device, size_t size);

snpuError_t stop_device(Device* d);
snpuError_t restart_device(Device* d);

// Some device has a UCE range (one atomic load); whether [ptr, ptr + size) overlaps one (snpuMemRangeHasUce).
bool uce_active();
bool range_has_uce(const void* ptr, size_t size);

// The device's UCE ranges (aclrtGetMemUceInfo).
std::vector<std::pair<void*, size_t>> uce_ranges(int device);

}  // namespace softnpu::rt
