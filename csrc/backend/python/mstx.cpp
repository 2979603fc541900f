#include "backend/python/mstx.h"

#include <ATen/record_function.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/stream.h"

namespace py = pybind11;

namespace softnpu {

namespace {

// The annotation names the profiler's exporters read (python/softnpu/profiler/analysis/trace.py).
constexpr const char* kMarkPrefix = "mstx::mark::";
constexpr const char* kRangePrefix = "mstx::range::";

// A user-scope annotation begun now, or nullptr when nothing records (no profiler runs: torch_npu's mstx is off).
std::unique_ptr<at::RecordFunction> begin(const std::string& name) {
  auto rf = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (!rf->isActive()) return nullptr;
  rf->before(name);
  return rf;
}

// Ranges of range_start: ended by id, from any thread. Ids start at 1; 0 is torch_npu's "no range".
std::mutex ranges_mutex;
std::unordered_map<int64_t, std::unique_ptr<at::RecordFunction>> ranges;
std::atomic<int64_t> next_range_id{1};

// Ranges of range_push, a stack per domain and per thread, as torch_npu's (and NVTX's) push/pop.
thread_local std::unordered_map<std::string, std::vector<std::unique_ptr<at::RecordFunction>>> pushed;

// A stream argument names an existing npu stream (the markers themselves are host-side: see mstx.py).
void check_stream(int64_t stream_id, int device_index) {
  stream_for(static_cast<c10::DeviceIndex>(device_index), stream_id);
}

void mark(const std::string& message) { begin(kMarkPrefix + message).reset(); }

int64_t range_start(const std::string& message) {
  auto rf = begin(kRangePrefix + message);
  if (!rf) return 0;
  const int64_t id = next_range_id.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(ranges_mutex);
  ranges.emplace(id, std::move(rf));
  return id;
}

void range_end(int64_t id) {
  std::unique_ptr<at::RecordFunction> rf;
  {
    std::lock_guard<std::mutex> lock(ranges_mutex);
    const auto it = ranges.find(id);
    if (it == ranges.end()) return;
    rf = std::move(it->second);
    ranges.erase(it);
  }
  rf->end();
}

// The new range's level (the depth before the push), or -1 when nothing records.
int range_push(const std::string& message, const std::string& domain) {
  auto rf = begin(kRangePrefix + message);
  if (!rf) return -1;
  auto& stack = pushed[domain];
  stack.push_back(std::move(rf));
  return static_cast<int>(stack.size()) - 1;
}

// The depth after the pop (the popped range's level), or -1 when the domain has no open range on this thread.
int range_pop(const std::string& domain) {
  const auto it = pushed.find(domain);
  if (it == pushed.end() || it->second.empty()) return -1;
  it->second.back()->end();
  it->second.pop_back();
  return static_cast<int>(it->second.size());
}

}  // namespace

void register_mstx_bindings(py::module_& m) {
  py::module_ mstx = m.def_submodule("_mstx", "markers and ranges on the profiler's timeline (torch.npu.mstx)");
  mstx.def("_mark_on_host", [](const std::string& message, const std::string&) { mark(message); },
           py::arg("message"), py::arg("domain") = "default");
  mstx.def(
      "_mark",
      [](const std::string& message, int64_t stream_id, int device_index, int, const std::string&) {
        check_stream(stream_id, device_index);
        mark(message);
      },
      py::arg("message"), py::arg("stream_id") = 0, py::arg("device_index") = 0, py::arg("device_type") = 0,
      py::arg("domain") = "default");
  mstx.def("_range_start_on_host", [](const std::string& message, const std::string&) { return range_start(message); },
           py::arg("message"), py::arg("domain") = "default");
  mstx.def(
      "_range_start",
      [](const std::string& message, int64_t stream_id, int device_index, int, const std::string&) {
        check_stream(stream_id, device_index);
        return range_start(message);
      },
      py::arg("message"), py::arg("stream_id") = 0, py::arg("device_index") = 0, py::arg("device_type") = 0,
      py::arg("domain") = "default");
  mstx.def("_range_end", [](int64_t id, const std::string&) { range_end(id); }, py::arg("range_id"),
           py::arg("domain") = "default");
  mstx.def("_range_push_on_host", &range_push, py::arg("message"), py::arg("domain") = "default");
  mstx.def(
      "_range_push",
      [](const std::string& message, int64_t stream_id, int device_index, int, const std::string& domain) {
        check_stream(stream_id, device_index);
        return range_push(message, domain);
      },
      py::arg("message"), py::arg("stream_id") = 0, py::arg("device_index") = 0, py::arg("device_type") = 0,
      py::arg("domain") = "default");
  mstx.def("_range_pop", &range_pop, py::arg("domain") = "default");
}

}  // namespace softnpu
