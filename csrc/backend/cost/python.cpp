// softnpu._C's entry points of the cost model, for softnpu.cost: the estimator (fake tensors) asks the model about each
// op it sees, the profiler helpers read the estimates of the last trace.
#include "backend/cost/python.h"

#include <torch/csrc/jit/python/pybind_utils.h>

#include <map>

#include "backend/cost/cost_model.h"
#include "backend/ops/op_info.h"
#include "backend/profiler/launch_trace.h"

namespace softnpu::cost {

namespace py = pybind11;

namespace {

// A chip outside the table (a what-if study, an older chip a published result was measured on): its figures in the
// table's fields and units (cube_fp16_tflops, hbm_gbps, ...; l2_bytes in bytes).
Chip chip_from_dict(const py::dict& d) {
  snpuSocProfile p{};
  const std::string name = d.contains("name") ? py::cast<std::string>(d["name"]) : std::string("custom");
  p.name = name.c_str();
  const auto number = [&](const char* key) {
    TORCH_CHECK_VALUE(d.contains(key), "a chip given as a dict needs '", key, "'");
    return py::cast<double>(d[key]);
  };
  p.ai_cores = static_cast<int>(number("ai_cores"));
  p.cube_fp16_tflops = number("cube_fp16_tflops");
  p.cube_fp32_tflops = number("cube_fp32_tflops");
  p.cube_int8_tops = number("cube_int8_tops");
  p.vector_fp16_tflops = number("vector_fp16_tflops");
  p.hbm_gbps = number("hbm_gbps");
  p.l2_bytes = static_cast<uint64_t>(number("l2_bytes"));
  p.hccs_gbps = number("hccs_gbps");
  p.roce_gbps = number("roce_gbps");
  p.host_link_gbps = number("host_link_gbps");
  return chip_from_profile(p);
}

// soc: None (the selected chip), a SoC table row's name, or a dict of a chip's figures.
Chip chip(const py::object& soc) {
  if (soc.is_none()) return selected_chip();
  if (py::isinstance<py::dict>(soc)) return chip_from_dict(soc.cast<py::dict>());
  const std::string name = py::cast<std::string>(soc);
  static std::map<std::string, Chip> chips;  // under the GIL
  auto it = chips.find(name);
  if (it == chips.end()) it = chips.emplace(name, chip_named(name)).first;
  return it->second;
}

py::dict to_dict(const Estimate& e) {
  py::dict d;
  d["us"] = e.us;
  d["flops"] = e.flops;
  d["model_flops"] = e.model_flops;
  d["bytes"] = e.bytes;
  d["bound"] = bound_name(e.bound);
  d["unit"] = unit_name(e.unit);
  return d;
}

template <typename Enum, size_t N>
Enum parse(const std::string& value, const char* what, const std::pair<const char*, Enum> (&names)[N]) {
  std::string choices;
  for (const auto& [name, e] : names) {
    if (value == name) return e;
    choices += choices.empty() ? name : std::string(", ") + name;
  }
  TORCH_CHECK_VALUE(false, "unknown ", what, " '", value, "': one of ", choices);
}

constexpr std::pair<const char*, CopyKind> kCopyKinds[] = {
    {"HtoD", CopyKind::kHostToDevice}, {"DtoH", CopyKind::kDeviceToHost}, {"DtoD", CopyKind::kDeviceToDevice}};
constexpr std::pair<const char*, Collective> kCollectives[] = {
    {"all_reduce", Collective::kAllReduce},         {"all_gather", Collective::kAllGather},
    {"reduce_scatter", Collective::kReduceScatter}, {"broadcast", Collective::kBroadcast},
    {"all_to_all", Collective::kAllToAll},          {"send_recv", Collective::kSendRecv}};
constexpr std::pair<const char*, Link> kLinks[] = {{"hccs", Link::kHccs}, {"roce", Link::kRoce}};

}  // namespace

void register_python(py::module& m) {
  // The kernel an op launches on the op path ("aten::mm" or "aten::add.Tensor"), from its arguments as the op got
  // them and its fresh outputs: a dict (us, flops, bytes, bound, unit), or None for an op that launches none.
  m.def("_cost_estimate_op", [](const std::string& qualified, const py::tuple& args, const py::dict& kwargs,
                                const std::vector<at::Tensor>& outputs, const py::object& soc) -> py::object {
    const auto dot = qualified.find('.');
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(
        qualified.substr(0, dot).c_str(), dot == std::string::npos ? "" : qualified.substr(dot + 1).c_str());
    const torch::jit::Stack stack =
        torch::jit::createStackForSchema(op.schema(), torch::jit::tuple_slice(args), py::kwargs(kwargs), std::nullopt);
    const std::vector<c10::IValue> outs(outputs.begin(), outputs.end());
    const auto e = estimate_op(chip(soc), op_info(op), stack, outs);
    return e ? py::object(to_dict(*e)) : py::none();
  });
  // The ops with model FLOPs (torch_npu.utils.FlopsCounter asks the model about these only).
  m.def("_cost_cube_ops", [] { return cube_ops(); });
  m.def("_cost_estimate_copy", [](double bytes, const std::string& kind, bool pageable, const py::object& soc) {
    return to_dict(estimate_copy(chip(soc), bytes, parse(kind, "copy kind", kCopyKinds), pageable));
  });
  m.def("_cost_estimate_collective",
        [](const std::string& kind, double bytes, int ranks, const std::string& link, const py::object& soc) {
          return to_dict(estimate_collective(chip(soc), parse(kind, "collective", kCollectives), bytes, ranks,
                                             parse(link, "link", kLinks)));
        });
  // The chip the model computes with (the SoC row in per-second units).
  m.def("_cost_chip", [](const py::object& soc) {
    const Chip c = chip(soc);
    py::dict d;
    d["name"] = c.name;
    d["ai_cores"] = c.ai_cores;
    d["cube_fp16_flops"] = c.cube_fp16_flops;
    d["cube_fp32_flops"] = c.cube_fp32_flops;
    d["cube_int8_ops"] = c.cube_int8_ops;
    d["vector_fp16_flops"] = c.vector_fp16_flops;
    d["hbm_bytes_per_s"] = c.hbm_bytes_per_s;
    d["l2_bytes"] = c.l2_bytes;
    d["hccs_bytes_per_s"] = c.hccs_bytes_per_s;
    d["roce_bytes_per_s"] = c.roce_bytes_per_s;
    d["host_link_bytes_per_s"] = c.host_link_bytes_per_s;
    return d;
  });
  m.def("_cost_factors", [] {
    py::list out;
#define SOFTNPU_COST_FACTOR(name, value, unit, source) out.append(py::make_tuple(#name, kFactors.name, unit, source));
#include "common/cost_factors.def"
#undef SOFTNPU_COST_FACTOR
    return out;
  });
  // The estimates of the kernels of the last trace the profiler processed: {launch correlation id: dict}.
  m.def("_cost_trace_estimates", [] {
    py::dict d;
    for (const auto& [launch, e] : profiler::last_trace_estimates()) d[py::int_(launch)] = to_dict(e);
    return d;
  });
}

}  // namespace softnpu::cost
