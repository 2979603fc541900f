// The queue of the allocator's records for the stream sanitizer (gpu_trace.h): filled from any thread, emptied by
// Python on the host thread.
#include "backend/gpu_trace.h"

#include <mutex>
#include <utility>

namespace softnpu::gpu_trace {

std::atomic<bool> g_allocator_records_enabled{false};

namespace {

std::mutex g_mutex;
std::vector<AllocatorRecord> g_records;

}  // namespace

void queue_allocator_record(AllocatorRecord record) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.push_back(record);
}

std::vector<AllocatorRecord> take_allocator_records() {
  std::vector<AllocatorRecord> taken;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::swap(taken, g_records);
  return taken;
}

}  // namespace softnpu::gpu_trace
