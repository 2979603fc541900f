// The cost model of the SoC: how long a kernel of the op path, a copy or a collective would take on the Ascend chip the
// device presents as. A roofline per kernel over the chip's published figures (csrc/common/soc_profiles.def) and a
// few global factors (csrc/common/cost_factors.def):
//   cube kernels (matmul, convolution, attention's products)  max(FLOPs / cube peak of the dtype, bytes / HBM)
//   vector kernels (everything else the op path launches)       max(bytes / HBM, element work / vector peak)
//   copies                                                       bytes / (HBM, or the host link across host and device)
//   collectives                                                  latency + algorithm bytes / link bandwidth
// each at least the kernel floor. One model for every caller: the profiler (an estimate beside each kernel's measured
// duration) and softnpu.cost's estimator (fake tensors, no computation) call the same functions.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

#include <optional>
#include <string>
#include <vector>

#include "softnpu/runtime.h"

namespace softnpu {
struct OpInfo;
}

namespace softnpu::cost {

// What limits a kernel (or a step): the units' arithmetic, device memory, the fixed cost of launching, the links.
enum class Bound : uint8_t { kCompute, kMemory, kLaunch, kCommunication };
// Where a kernel runs.
enum class Unit : uint8_t { kCube, kVector, kCopy, kCollective };
const char* bound_name(Bound bound);
const char* unit_name(Unit unit);

// A chip's figures in the units the model computes with (per second, bytes).
struct Chip {
  std::string name;
  int ai_cores = 0;
  double cube_fp16_flops = 0;  // float16 and bfloat16
  double cube_fp32_flops = 0;  // float32 as HF32; 0 where the cube has no float32 path
  double cube_int8_ops = 0;
  double vector_fp16_flops = 0;
  double hbm_bytes_per_s = 0;
  double l2_bytes = 0;
  double hccs_bytes_per_s = 0;
  double roce_bytes_per_s = 0;
  double host_link_bytes_per_s = 0;  // per direction
};
Chip chip_from_profile(const snpuSocProfile& profile);
// The chip of a SoC table row, or of the selected SoC (SOFTNPU_SOC_VERSION) for an empty name.
Chip chip_named(const std::string& name);
// The selected SoC's chip, read once.
const Chip& selected_chip();

// The global factors of csrc/common/cost_factors.def.
struct Factors {
#define SOFTNPU_COST_FACTOR(name, value, unit, source) double name = value;
#include "common/cost_factors.def"
#undef SOFTNPU_COST_FACTOR
};
inline constexpr Factors kFactors{};

struct Estimate {
  double us = 0;     // duration on the device
  double flops = 0;  // arithmetic counted: the cube's for cube kernels, element work for vector kernels
  // The op's FLOPs as torch.utils.flop_counter counts them (2 per multiply-add of its products; attention without a
  // causal discount); 0 for vector kernels. What MFU and FlopsCounter count, where `flops` is the work the chip does.
  double model_flops = 0;
  double bytes = 0;  // device memory (or link) traffic
  Bound bound = Bound::kMemory;
  Unit unit = Unit::kVector;
};

// The kernel the op path launches for an op: its arguments as the op got them, and its fresh outputs (the tensors a
// written argument holds are counted from the arguments, read and written). nullopt for an op that launches no
// kernel (a view, an allocation).
std::optional<Estimate> estimate_op(const Chip& chip, const OpInfo& info, c10::ArrayRef<c10::IValue> args,
                                    c10::ArrayRef<c10::IValue> outputs);

// The ops the model runs on the cube (matrix products, convolutions, attention), by schema name: the ops with model
// FLOPs.
std::vector<std::string> cube_ops();

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// pageable: the host side is not pinned, so the copy also goes through a host staging buffer (H2D and D2H only).
Estimate estimate_copy(const Chip& chip, double bytes, CopyKind kind, bool pageable = false);

// A memset: its bytes written once on HBM.
Estimate estimate_memset(const Chip& chip, double bytes);

enum class Collective : uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kSendRecv };
// The links a collective runs over: HCCS within a server (or an A3 supernode), RoCE between servers.
enum class Link : uint8_t { kHccs, kRoce };
// bytes: each rank's message (the tensor all_reduce gets; all_gather's output; reduce_scatter's input).
Estimate estimate_collective(const Chip& chip, Collective kind, double bytes, int ranks, Link link);

}  // namespace softnpu::cost
