// hccl collectives while a profiler session records: each collective of ProcessGroupHCCL (backend/c10d) becomes a
// device activity on its communication stream, named as HCCL names it (hcom_allReduce_, ...), from the moment it is
// handed to Gloo to the moment Gloo completes it, with the bytes it carries. torch's trace shows it as NCCL kernels
// are shown for CUDA; the Ascend exporter (python/softnpu/profiler/analysis) makes communication data of it.
//
// Off, a collective pays one relaxed load and a branch.
#pragma once

#include <c10/core/Stream.h>
#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace softnpu::profiler {

struct CollectiveEvent {
  std::string name;    // HCCL's operator name: hcom_allReduce_, hcom_broadcast_, ...
  int device;
  uint64_t stream;     // runtime id of the communication stream
  uint64_t bytes;      // the payload: the input tensors' bytes (the outputs' for a receive)
  int64_t start_ns;    // CLOCK_REALTIME, the clock of the runtime's records
  int64_t end_ns;
};

extern std::atomic<bool> g_recording_collectives;

void set_recording_collectives(bool on);
std::vector<CollectiveEvent> take_collective_events();

int64_t collective_clock_ns();

// The time a collective starts, or 0 when no session records.
inline int64_t collective_begin() {
  return C10_UNLIKELY(g_recording_collectives.load(std::memory_order_relaxed)) ? collective_clock_ns() : 0;
}

// Records a collective that began at `start_ns` (collective_begin()'s, not 0) and ends now. `title` is the
// backend's name ("hccl:all_reduce").
void collective_end(int64_t start_ns, const char* title, c10::Stream stream, uint64_t bytes);

}  // namespace softnpu::profiler
