// softnpu._c10d: ProcessGroupHCCL for Python, as a torch.distributed Backend (python/softnpu/distributed.py registers
// it as "hccl"), with torch_npu's ProcessGroupHCCL.Options. A module of its own, imported after torch.distributed: its
// classes derive from torch._C._distributed_c10d.Backend and Backend.Options, which torch registers only when
// torch.distributed is imported.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "backend/c10d/collective_fault.h"
#include "backend/c10d/process_group_hccl.h"

namespace py = pybind11;

namespace {

// torch_npu's ProcessGroupHCCL::Options: the group's HCCL settings (hccl_config: {"hccl_buffer_size": 300,
// "group_name": "custom", "hccl_exec_timeout": ..., ...}, as vllm-ascend, verl and sglang pass them), kept with the
// group and read back through its `options`. Gloo carries the collectives here, so they configure nothing else.
struct HCCLOptions : c10d::Backend::Options {
  HCCLOptions() : Options("hccl") {}
  int64_t op_timeout = 0;
  bool is_high_priority_stream = false;
  std::vector<uint32_t> global_ranks_in_group;
  std::unordered_map<std::string, std::variant<int64_t, std::string>> hccl_config;
  std::string group_id;
};

// The options each group was created with. ProcessGroupHCCL is the collective engine's class; the options are a
// Python-facing record, so they live here, keyed by the group and dropped once it is gone.
class GroupOptions {
 public:
  void set(const c10::intrusive_ptr<softnpu::ProcessGroupHCCL>& group, c10::intrusive_ptr<HCCLOptions> options) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = table_.begin(); it != table_.end();) {
      it = it->second.first.expired() ? table_.erase(it) : std::next(it);
    }
    table_.insert_or_assign(group.get(), std::make_pair(c10::weak_intrusive_ptr<softnpu::ProcessGroupHCCL>(group),
                                                        std::move(options)));
  }
  c10::intrusive_ptr<HCCLOptions> get(const softnpu::ProcessGroupHCCL& group) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = table_.find(&group);
    if (it == table_.end() || it->second.first.expired()) {
      return c10::make_intrusive<HCCLOptions>();  // a group made without options: the defaults
    }
    return it->second.second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<const softnpu::ProcessGroupHCCL*,
                     std::pair<c10::weak_intrusive_ptr<softnpu::ProcessGroupHCCL>, c10::intrusive_ptr<HCCLOptions>>>
      table_;
};

GroupOptions& group_options() {
  static GroupOptions* table = new GroupOptions();  // never destroyed: groups may outlive static destruction
  return *table;
}

c10::intrusive_ptr<softnpu::ProcessGroupHCCL> make_group(const py::object& store, int rank, int size,
                                                         std::chrono::milliseconds timeout) {
  auto gloo = py::module_::import("torch._C._distributed_c10d")
                  .attr("ProcessGroupGloo")(store, rank, size, timeout)
                  .cast<c10::intrusive_ptr<c10d::Backend>>();
  return c10::make_intrusive<softnpu::ProcessGroupHCCL>(std::move(gloo), timeout);
}

}  // namespace

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "softnpu: the hccl collective backend (use torch.distributed)";
  auto options_base = py::module_::import("torch._C._distributed_c10d").attr("Backend").attr("Options");
  auto group =
      py::class_<softnpu::ProcessGroupHCCL, c10::intrusive_ptr<softnpu::ProcessGroupHCCL>>(
          m, "ProcessGroupHCCL", py::module_::import("torch._C._distributed_c10d").attr("Backend"),
          "torch.distributed's `hccl` backend for npu tensors, carried by a Gloo backend of the same group")
          // torch_npu's signature: the Gloo backend is created here, on the same store.
          .def(py::init(&make_group), py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"))
          // With options: a copy is kept (later changes to the caller's Options do not reach the group, as on
          // torch_npu); their timeout is the group's.
          .def(py::init([](const py::object& store, int rank, int size, const c10::intrusive_ptr<HCCLOptions>& opts) {
                 auto created = make_group(store, rank, size, opts->timeout);
                 group_options().set(created, c10::make_intrusive<HCCLOptions>(*opts));
                 return created;
               }),
               py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("options"))
          .def_property_readonly(
              "options", [](const softnpu::ProcessGroupHCCL& self) { return group_options().get(self); },
              "the ProcessGroupHCCL.Options the group was created with")
          // torch_npu's communicator name, the `hcom` of the compute+communication ops (npu_mm_all_reduce_base,
          // ...): here the group's name in c10d's registry, by which those ops find the group.
          .def(
              "get_hccl_comm_name",
              [](const softnpu::ProcessGroupHCCL& self, int64_t rank_id, bool init_comm) {
                return self.getGroupUid();
              },
              py::arg("rank_id"), py::arg("init_comm") = true)
          // torch_npu's: aborts the group's communicators (its pending collectives fail, naming `reason`); the group
          // is then destroyed and a new one created.
          .def(
              "abort_hccl_comm",
              [](softnpu::ProcessGroupHCCL& self, const std::optional<std::string>& reason) {
                self.abort(reason.value_or(""));
              },
              py::arg("reason") = py::none(), py::call_guard<py::gil_scoped_release>());

  // torch.npu._fault's hccl kinds (kind 1: hccl_timeout, 2: dead_peer), armed in this process.
  m.def(
      "_inject_fault",
      [](int kind, uint64_t at, const std::string& op) {
        TORCH_CHECK_VALUE(kind == 1 || kind == 2, "unknown hccl fault kind ", kind);
        softnpu::c10d_fault::arm(static_cast<softnpu::c10d_fault::Kind>(kind), at, op);
      },
      py::arg("kind"), py::arg("at"), py::arg("op"));
  m.def("_clear_faults", &softnpu::c10d_fault::clear);

  py::class_<HCCLOptions, c10::intrusive_ptr<HCCLOptions>>(group, "Options", options_base,
                                                           "torch_npu's options of an hccl group")
      .def(py::init<>())
      .def_readwrite("op_timeout", &HCCLOptions::op_timeout)
      .def_readwrite("is_high_priority_stream", &HCCLOptions::is_high_priority_stream)
      .def_readwrite("global_ranks_in_group", &HCCLOptions::global_ranks_in_group)
      .def_readwrite("hccl_config", &HCCLOptions::hccl_config)
      .def_readwrite("group_id", &HCCLOptions::group_id)
      .def("__deepcopy__",
           [](const HCCLOptions& self, const py::dict&) { return c10::make_intrusive<HCCLOptions>(self); })
      .def("__copy__", [](const HCCLOptions& self) { return c10::make_intrusive<HCCLOptions>(self); });
}
