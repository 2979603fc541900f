// Graphs: stream capture records a stream's kernels, copies and memsets instead of running them; a graph launch runs
// the recorded sequence as one task (runtime.h, "graphs").
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "stream.h"

namespace softnpu::rt {

class Graph {
 public:
  // Recorded kernel, copy and memset tasks, in launch order. A kernel's arg is owned by the graph.
  std::vector<Task> tasks;

  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  // The last release runs the recorded kernels' cleanups.
  void release();

 private:
  std::atomic<int> refs_{1};
};

class StreamCapture {
 public:
  StreamCapture(Stream* s, snpuStreamCaptureMode m) : stream(s), mode(m), thread(std::this_thread::get_id()) {}
  Stream* const stream;
  const snpuStreamCaptureMode mode;
  const std::thread::id thread;  // the thread that began it, for snpuStreamCaptureModeThreadLocal

  std::mutex mutex;  // launches may come from several host threads (autograd's device threads)
  Graph* graph = new Graph;  // guarded by mutex
  bool invalidated = false;  // guarded by mutex
};

// launch()'s path for a capturing stream: records the task, or refuses it (invalidating the capture).
snpuError_t capture_task(StreamCapture* c, const Task& task, bool wait);

// Invalidates c and returns snpuErrorStreamCaptureUnsupported saying that call is not permitted.
snpuError_t refuse_in_capture(StreamCapture* c, const std::string& call);

// For a call that is unsafe during capture on device d (snpuDeviceSynchronize, snpuMemcpy, snpuFree): refuses it,
// invalidating the captures it concerns by their mode, or returns snpuSuccess. Costs one atomic load when nothing
// captures.
snpuError_t check_unsafe_in_capture(const Device* d, const char* call);

snpuError_t begin_capture(Stream* s, snpuStreamCaptureMode mode);
snpuError_t end_capture(Stream* s, Graph** graph);
snpuError_t launch_graph(Graph* g, Stream* s);

}  // namespace softnpu::rt
