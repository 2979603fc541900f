// Graphs: stream capture records a stream's kernels, copies and memsets instead of running them; a graph launch runs
// the recorded sequence as one task (runtime.h, "graphs").
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "event.h"
#include "stream.h"

namespace softnpu::rt {

class Graph {
 public:
  // Recorded kernel, copy and memset tasks, in launch order. A kernel's arg is owned by the graph.
  std::vector<Task> tasks;
  // Conditional (IF) nodes: tasks [begin, end) run only if the byte at pred is non-zero when a launch reaches
  // begin. In capture order: by begin, an enclosing branch before those it holds.
  struct Branch {
    size_t begin;
    size_t end;
    const uint8_t* pred;  // device memory
  };
  std::vector<Branch> branches;

  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  // The last release runs the recorded kernels' cleanups.
  void release();

 private:
  std::atomic<int> refs_{1};
};

// One capture: begun on `stream`, joined by the streams that waited on an event recorded in it (each then records
// into the same graph: the graph runs its tasks in launch order, which the host's launches make an order that keeps
// every fork/join dependency).
class StreamCapture {
 public:
  StreamCapture(Stream* s, snpuStreamCaptureMode m, uint64_t capture_id)
      : stream(s), mode(m), thread(std::this_thread::get_id()), id(capture_id) {}
  Stream* const stream;
  const snpuStreamCaptureMode mode;
  const std::thread::id thread;  // the thread that began it, for snpuStreamCaptureModeThreadLocal
  const uint64_t id;             // unique in the process, never 0 (snpuStreamGetCaptureInfo)

  std::mutex mutex;  // launches may come from several host threads (autograd's device threads)
  Graph* graph = new Graph;      // guarded by mutex
  bool invalidated = false;      // guarded by mutex
  std::vector<Stream*> joined;   // guarded by mutex; each holds a reference until the capture ends
  std::vector<size_t> open_branches;  // guarded by mutex; indices into graph->branches, innermost last
};

// launch()'s path for a capturing stream: records the task, or refuses it (invalidating the capture).
snpuError_t capture_task(StreamCapture* c, const Task& task, bool wait);

// Invalidates c and returns snpuErrorStreamCaptureUnsupported saying that call is not permitted.
snpuError_t refuse_in_capture(StreamCapture* c, const std::string& call);

// For a call that is unsafe during capture on device d (snpuDeviceSynchronize, snpuMemcpy, snpuFree): refuses it,
// invalidating the captures it concerns by their mode, or returns snpuSuccess. Costs one atomic load when nothing
// captures.
snpuError_t check_unsafe_in_capture(const Device* d, const char* call);

// snpuEventRecord on a capturing stream: the event names the capture instead of marking the queue.
snpuError_t record_in_capture(StreamCapture* c, Event* ev);
// snpuStreamWaitEvent where the stream captures or the event was recorded in a capture: a stream outside any capture
// joins the event's capture; within the same capture the wait is already kept by launch order; anything else is
// refused.
snpuError_t wait_in_capture(Stream* s, uint64_t event_capture_id);

// snpuStreamBeginCaptureToIfNode / snpuStreamEndCaptureToConditionalNode.
snpuError_t begin_if_node(Stream* s, const void* pred);
snpuError_t end_conditional_node(Stream* s);

snpuError_t begin_capture(Stream* s, snpuStreamCaptureMode mode);
snpuError_t end_capture(Stream* s, Graph** graph);
snpuError_t launch_graph(Graph* g, Stream* s);

}  // namespace softnpu::rt
