#include "backend/profiler/collective_trace.h"

#include <time.h>

#include <cstring>
#include <mutex>
#include <utility>

#include "backend/stream.h"
#include "softnpu/runtime.h"

namespace softnpu::profiler {

std::atomic<bool> g_recording_collectives{false};

namespace {

struct Events {
  std::mutex mutex;
  std::vector<CollectiveEvent> events;
};

Events& events() {
  static Events e;
  return e;
}

// c10d's collective names -> HCCL's operator names (what Ascend's traces and communication.json show).
std::string hccl_name(const char* title) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"all_reduce", "hcom_allReduce_"},         {"allreduce_coalesced", "hcom_allReduce_"},
      {"broadcast", "hcom_broadcast_"},          {"reduce", "hcom_reduce_"},
      {"all_gather", "hcom_allGather_"},         {"allgather", "hcom_allGather_"},
      {"reduce_scatter", "hcom_reduceScatter_"}, {"alltoall", "hcom_alltoall_"},
      {"all_to_all", "hcom_alltoall_"},          {"gather", "hcom_gather_"},
      {"scatter", "hcom_scatter_"},              {"send", "hcom_send_"},
      {"recv", "hcom_receive_"},                 {"barrier", "hcom_barrier_"},
  };
  const char* op = std::strchr(title, ':');
  op = op ? op + 1 : title;
  for (const auto& [c10d, hccl] : kNames)
    if (std::strncmp(op, c10d, std::strlen(c10d)) == 0) return hccl;
  return std::string("hcom_") + op + "_";
}

}  // namespace

int64_t collective_clock_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void set_recording_collectives(bool on) { g_recording_collectives.store(on, std::memory_order_relaxed); }

std::vector<CollectiveEvent> take_collective_events() {
  const std::lock_guard<std::mutex> lock(events().mutex);
  return std::exchange(events().events, {});
}

void collective_end(int64_t start_ns, const char* title, c10::Stream stream, uint64_t bytes) {
  if (start_ns == 0 || !g_recording_collectives.load(std::memory_order_relaxed)) return;
  const int64_t end_ns = collective_clock_ns();
  int device = stream.device_index();
  int priority = 0;
  uint64_t id = 0;
  snpuStreamGetInfo(stream_for(stream.device_index(), stream.id()).handle(), &device, &priority, &id);
  CollectiveEvent e{hccl_name(title), device, id, bytes, start_ns, end_ns};
  const std::lock_guard<std::mutex> lock(events().mutex);
  events().events.push_back(std::move(e));
}

}  // namespace softnpu::profiler
