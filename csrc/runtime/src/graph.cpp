#include "graph.h"

#include <algorithm>
#include <cstring>

#include "device.h"
#include "errors.h"
#include "kernel.h"
#include "parallel_copy.h"

namespace softnpu::rt {

namespace {

// Captures in progress on all devices; checked by the calls that are unsafe during any capture.
std::mutex g_captures_mutex;
std::vector<StreamCapture*> g_captures;  // guarded by g_captures_mutex
std::atomic<int> g_capture_count{0};
std::atomic<uint64_t> g_next_capture_id{1};

std::string stream_name(const Stream* s) { return "stream " + std::to_string(s->id); }

// c->mutex held.
snpuError_t refuse_locked(StreamCapture* c, const std::string& call) {
  c->invalidated = true;
  return fail(snpuErrorStreamCaptureUnsupported,
              call + ": operation not permitted when stream is capturing (" + stream_name(c->stream) +
                  " of device " + std::to_string(c->stream->device->index) + "); the capture is invalidated");
}

// The graph task: the recorded work in order, on the compute thread that took it; a branch whose predicate is false
// is skipped with every branch it holds.
int run_graph(void* arg) {
  const Graph& g = *static_cast<const Graph*>(arg);
  size_t next_branch = 0;
  for (size_t i = 0; i < g.tasks.size();) {
    bool skipped = false;
    while (next_branch < g.branches.size() && g.branches[next_branch].begin == i) {
      const Graph::Branch& b = g.branches[next_branch++];
      if (*b.pred != 0) continue;
      while (next_branch < g.branches.size() && g.branches[next_branch].begin < b.end) ++next_branch;
      i = b.end;
      skipped = true;
      break;
    }
    if (skipped) continue;
    const Task& t = g.tasks[i++];
    switch (t.kind) {
      case TaskKind::kKernel:
        if (int code = run_recorded_kernel(t)) return code;
        break;
      case TaskKind::kCopy:
        parallel_memcpy(t.copy.dst, t.copy.src, t.copy.size, kernel_thread_budget(t.copy.size));
        break;
      case TaskKind::kMemset:
        std::memset(t.memset.dst, t.memset.value, t.memset.size);
        break;
      default:
        break;
    }
  }
  return 0;
}

void release_graph(void* arg) { static_cast<Graph*>(arg)->release(); }

}  // namespace

void Graph::release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  for (const Task& t : tasks)
    if (t.kind == TaskKind::kKernel) run_cleanup(t);
  delete this;
}

snpuError_t capture_task(StreamCapture* c, const Task& task, bool wait) {
  std::lock_guard<std::mutex> lock(c->mutex);
  const char* refused = nullptr;
  if (task.kind == TaskKind::kRecord) refused = "snpuEventRecord";
  if (task.kind == TaskKind::kWait) refused = "snpuStreamWaitEvent";
  if (task.kind == TaskKind::kCopy && (wait || task.copy.staging))
    refused = "snpuMemcpyAsync with pageable host memory";
  if (!refused && !c->invalidated) {
    c->graph->tasks.push_back(task);
    return snpuSuccess;
  }
  release_task_references(task);
  if (task.kind == TaskKind::kKernel) run_cleanup(task);
  if (refused) return refuse_locked(c, refused);
  return fail(snpuErrorStreamCaptureInvalidated,
              std::string(task.name) + ": the capture of " + stream_name(c->stream) +
                  " was invalidated by an earlier operation not permitted when stream is capturing");
}

snpuError_t refuse_in_capture(StreamCapture* c, const std::string& call) {
  std::lock_guard<std::mutex> lock(c->mutex);
  return refuse_locked(c, call);
}

snpuError_t check_unsafe_in_capture(const Device* d, const char* call) {
  if (g_capture_count.load(std::memory_order_acquire) == 0) return snpuSuccess;
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  const auto me = std::this_thread::get_id();
  StreamCapture* first = nullptr;
  for (StreamCapture* c : g_captures) {
    if (c->stream->device != d || c->mode == snpuStreamCaptureModeRelaxed) continue;
    if (c->mode == snpuStreamCaptureModeThreadLocal && c->thread != me) continue;
    std::lock_guard<std::mutex> capture_lock(c->mutex);
    c->invalidated = true;
    if (!first) first = c;
  }
  if (!first) return snpuSuccess;
  std::lock_guard<std::mutex> capture_lock(first->mutex);
  return refuse_locked(first, call);
}

namespace {

// The capture the stream began (not one it joined), with its mutex held; or an error.
snpuError_t own_capture(Stream* s, const char* call, StreamCapture** out) {
  StreamCapture* c = s->capture.load(std::memory_order_acquire);
  if (!c) return fail(snpuErrorInvalidValue, std::string(call) + ": " + stream_name(s) + " is not capturing");
  if (c->stream != s)
    return fail(snpuErrorInvalidValue, std::string(call) + ": " + stream_name(s) + " joined the capture of " +
                                           stream_name(c->stream) + ", where conditional nodes are made");
  *out = c;
  return snpuSuccess;
}

}  // namespace

snpuError_t begin_if_node(Stream* s, const void* pred) {
  StreamCapture* c;
  if (snpuError_t e = own_capture(s, "snpuStreamBeginCaptureToIfNode", &c)) return e;
  if (!pred) return fail(snpuErrorInvalidValue, "snpuStreamBeginCaptureToIfNode: pred is NULL");
  std::lock_guard<std::mutex> lock(c->mutex);
  const size_t at = c->graph->tasks.size();
  c->open_branches.push_back(c->graph->branches.size());
  c->graph->branches.push_back({at, at, static_cast<const uint8_t*>(pred)});
  return snpuSuccess;
}

snpuError_t end_conditional_node(Stream* s) {
  StreamCapture* c;
  if (snpuError_t e = own_capture(s, "snpuStreamEndCaptureToConditionalNode", &c)) return e;
  std::lock_guard<std::mutex> lock(c->mutex);
  if (c->open_branches.empty())
    return fail(snpuErrorInvalidValue, "snpuStreamEndCaptureToConditionalNode: no conditional node is open on " +
                                           stream_name(s));
  c->graph->branches[c->open_branches.back()].end = c->graph->tasks.size();
  c->open_branches.pop_back();
  return snpuSuccess;
}

snpuError_t record_in_capture(StreamCapture* c, Event* ev) {
  std::lock_guard<std::mutex> lock(c->mutex);
  if (c->invalidated)
    return fail(snpuErrorStreamCaptureInvalidated,
                "snpuEventRecord: the capture of " + stream_name(c->stream) +
                    " was invalidated by an earlier operation not permitted when stream is capturing");
  ev->record_in_capture(c->id);
  return snpuSuccess;
}

snpuError_t wait_in_capture(Stream* s, uint64_t event_capture_id) {
  StreamCapture* mine = s->capture.load(std::memory_order_acquire);
  if (event_capture_id == 0) return refuse_in_capture(mine, "snpuStreamWaitEvent of an event recorded outside it");
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  auto it = std::find_if(g_captures.begin(), g_captures.end(),
                         [&](const StreamCapture* c) { return c->id == event_capture_id; });
  if (it == g_captures.end()) {
    if (mine) return refuse_in_capture(mine, "snpuStreamWaitEvent of an event recorded in an ended capture");
    return fail(snpuErrorInvalidValue,
                "snpuStreamWaitEvent: the event was recorded during a stream capture that has ended");
  }
  StreamCapture* c = *it;
  if (mine == c) return snpuSuccess;
  if (mine) return refuse_in_capture(mine, "snpuStreamWaitEvent of an event recorded in another capture");
  if (s == s->device->default_stream())
    return fail(snpuErrorInvalidValue, "snpuStreamWaitEvent: the default stream cannot join the capture of " +
                                           stream_name(c->stream));
  if (s->device != c->stream->device)
    return fail(snpuErrorInvalidValue, "snpuStreamWaitEvent: " + stream_name(s) +
                                           " cannot join a capture of another device's " + stream_name(c->stream));
  std::lock_guard<std::mutex> capture_lock(c->mutex);
  StreamCapture* expected = nullptr;
  if (!s->capture.compare_exchange_strong(expected, c))
    return fail(snpuErrorInvalidValue, "snpuStreamWaitEvent: " + stream_name(s) + " began capturing meanwhile");
  s->retain();
  c->joined.push_back(s);
  return snpuSuccess;
}

snpuError_t begin_capture(Stream* s, snpuStreamCaptureMode mode) {
  if (s == s->device->default_stream())
    return fail(snpuErrorInvalidValue, "snpuStreamBeginCapture: the default stream cannot be captured");
  if (mode < snpuStreamCaptureModeGlobal || mode > snpuStreamCaptureModeRelaxed)
    return fail(snpuErrorInvalidValue,
                "snpuStreamBeginCapture: " + std::to_string(mode) + " is not a snpuStreamCaptureMode");
  auto* c = new StreamCapture(s, mode, g_next_capture_id.fetch_add(1, std::memory_order_relaxed));
  StreamCapture* expected = nullptr;
  if (!s->capture.compare_exchange_strong(expected, c)) {
    delete c->graph;
    delete c;
    return fail(snpuErrorInvalidValue, "snpuStreamBeginCapture: " + stream_name(s) + " is already capturing");
  }
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  g_captures.push_back(c);
  g_capture_count.fetch_add(1, std::memory_order_release);
  return snpuSuccess;
}

snpuError_t end_capture(Stream* s, Graph** graph) {
  *graph = nullptr;
  StreamCapture* c = s->capture.load(std::memory_order_acquire);
  if (c && c->stream != s)
    return fail(snpuErrorInvalidValue, "snpuStreamEndCapture: " + stream_name(s) + " joined the capture of " +
                                           stream_name(c->stream) + ", which must end it");
  if (!c || !s->capture.compare_exchange_strong(c, nullptr))
    return fail(snpuErrorInvalidValue, "snpuStreamEndCapture: " + stream_name(s) + " is not capturing");
  {
    std::lock_guard<std::mutex> lock(g_captures_mutex);
    g_captures.erase(std::find(g_captures.begin(), g_captures.end(), c));
    g_capture_count.fetch_sub(1, std::memory_order_release);
  }
  for (Stream* joined : c->joined) {
    StreamCapture* expected = c;
    joined->capture.compare_exchange_strong(expected, nullptr);
    joined->release();
  }
  // The capture's launches have returned (ending a capture while they run is the caller's error, as in CUDA); only
  // a check of another device's unsafe call may hold its mutex now.
  Graph* g;
  bool invalidated;
  bool branch_open;
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    g = c->graph;
    invalidated = c->invalidated;
    branch_open = !c->open_branches.empty();
  }
  delete c;
  if (branch_open && !invalidated) {
    g->release();
    return fail(snpuErrorInvalidValue, "snpuStreamEndCapture: a conditional node of the capture of " +
                                           stream_name(s) + " is still open (snpuStreamEndCaptureToConditionalNode)");
  }
  if (invalidated) {
    g->release();
    return fail(snpuErrorStreamCaptureInvalidated, "snpuStreamEndCapture: the capture of " + stream_name(s) +
                                                       " was invalidated by an operation not permitted during it");
  }
  *graph = g;
  return snpuSuccess;
}

snpuError_t launch_graph(Graph* g, Stream* s) {
  if (StreamCapture* c = s->capture.load(std::memory_order_acquire))
    return refuse_in_capture(c, "snpuGraphLaunch");
  g->retain();
  Task task{};
  task.kind = TaskKind::kKernel;
  task.name = "NPUGraph";
  task.kernel.fn = run_graph;
  task.kernel.arg = g;
  task.kernel.cleanup = release_graph;
  return launch(s, task, false);
}

}  // namespace softnpu::rt
