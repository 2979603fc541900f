// A host function is a kernel of the stream that calls a Python function with its user data, holding the GIL while
// it runs (torch_npu's aclrtLaunchCallback with a blocking callback: the stream's later work waits for it). Captured
// into an NPU graph it runs at every replay. As on Ascend, the stream must first be subscribed (its callbacks are
// then reported; here the stream's own compute thread runs them, so no report thread is needed).
#include "backend/python/host_func.h"

#include <mutex>
#include <set>

#include "backend/npu_error.h"
#include "backend/stream.h"

namespace py = pybind11;

namespace softnpu {

namespace {

struct HostFunc {
  py::object fn;
  py::object data;
};

std::mutex g_subscribed_mutex;
std::set<snpuStream_t> g_subscribed;  // guarded by g_subscribed_mutex

int run_host_func(void* arg) {
  if (!Py_IsInitialized()) return 0;  // the interpreter is gone: nothing to call
  const auto* f = static_cast<const HostFunc*>(arg);
  py::gil_scoped_acquire gil;
  try {
    f->fn(f->data);
    return 0;
  } catch (py::error_already_set& e) {
    snpuKernelSetErrorMessage(("host function raised " + std::string(e.what())).c_str());
    return kernel_error_code(e);
  }
}

// After the launch ran, or when the graph it was captured into is destroyed.
void free_host_func(void* arg) {
  auto* f = static_cast<HostFunc*>(arg);
  if (!Py_IsInitialized()) {
    // Their interpreter is gone: the references cannot be dropped, only forgotten.
    f->fn.release();
    f->data.release();
  } else {
    py::gil_scoped_acquire gil;
    f->fn = py::object();
    f->data = py::object();
  }
  delete f;
}

bool subscribed(snpuStream_t stream) {
  std::lock_guard<std::mutex> lock(g_subscribed_mutex);
  return g_subscribed.count(stream) != 0;
}

void launch(const NPUStream& stream, const char* api, py::object fn, py::object data) {
  TORCH_CHECK_TYPE(PyCallable_Check(fn.ptr()), api, ": fn must be callable");
  auto* f = new HostFunc{std::move(fn), std::move(data)};
  snpuError_t err;
  {
    // The launch may wait for room in a full queue, whose kernels may be host functions needing the GIL.
    py::gil_scoped_release no_gil;
    err = snpuLaunchKernel(stream.handle(), "HostFunc", run_host_func, f, free_host_func);
  }
  NPU_CHECK(err);  // a refused launch already ran free_host_func
}

}  // namespace

void register_host_func_bindings(py::module_& m) {
  m.def("_launch_host_func", [](int64_t stream_id, int device, py::object fn, py::object data) {
    const NPUStream stream = stream_for(static_cast<c10::DeviceIndex>(device), stream_id);
    TORCH_CHECK(subscribed(stream.handle()),
                "_launch_host_func: the stream is not subscribed to report; call torch.npu._subscribe_report(stream) "
                "first");
    launch(stream, "_launch_host_func", std::move(fn), std::move(data));
  });
  // torch_npu's pending variant (aclrtLaunchHostFunc): no subscription; the Python side
  // (softnpu/npu/host_func.py) takes the host copies' bytes when the kernel runs.
  m.def("_launch_host_func_pending", [](int64_t stream_id, int device, py::object fn, py::object data) {
    launch(stream_for(static_cast<c10::DeviceIndex>(device), stream_id), "_launch_host_func_pending", std::move(fn),
           std::move(data));
  });
  m.def("_subscribe_report", [](int64_t stream_id, int device) {
    const NPUStream stream = stream_for(static_cast<c10::DeviceIndex>(device), stream_id);
    std::lock_guard<std::mutex> lock(g_subscribed_mutex);
    g_subscribed.insert(stream.handle());
  });
  m.def(
      "_unsubscribe_report",
      [](int64_t stream_id, int device) {
        const NPUStream stream = stream_for(static_cast<c10::DeviceIndex>(device), stream_id);
        stream.synchronize();  // its host functions have run
        std::lock_guard<std::mutex> lock(g_subscribed_mutex);
        g_subscribed.erase(stream.handle());
      },
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace softnpu
