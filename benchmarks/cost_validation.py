"""The cost model (softnpu.cost) against the chips' peaks and against end-to-end results Huawei and the Ascend ecosystem
publish. Each case names its source, the configuration the figure was measured in, and how the estimate reproduces it;
the model's factors are global (csrc/common/cost_factors.def): nothing here is tuned per case.

    python benchmarks/cost_validation.py       # prints the table (about a minute: each case runs its step on fake tensors)

tests/test_cost_model.py keeps every case within its band.
"""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

import softnpu.cost as cost

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "estimate"))
import llama  # noqa: E402
import resnet50  # noqa: E402

# The first-generation Ascend 910 (2019), which the device cannot present as (torch_npu's 910A numbers are outside the
# SoC table's families), in the table's fields. Huawei's launch and Hot Chips 31 ("DaVinci: A Scalable Architecture for
# Neural Network Computing"): 32 Da Vinci cores, 256 TFLOPS fp16, 512 TOPS int8, a 2048-bit vector unit per core,
# four HBM2 stacks, HCCS 3 x 240 Gb/s, RoCE 2 x 100 Gb/s, no float32 cube path. Derived: the clock from the fp16 peak
# (256e12 / (32 x 8192) = 0.98 GHz), the vector peak from it (32 x 128 lanes x 0.98 GHz). Estimated: HBM bandwidth
# 1.2 TB/s (as quoted for its Atlas 300T training card) and a 32 MiB L2. Host link: PCIe 4.0 x16 (Hot Chips 31).
ASCEND_910 = dict(name="Ascend910 (first generation)", ai_cores=32, cube_fp16_tflops=256.0, cube_fp32_tflops=0.0,
                  cube_int8_tops=512.0, vector_fp16_tflops=4.0, hbm_gbps=1200.0, l2_bytes=32 << 20, hccs_gbps=90.0,
                  roce_gbps=25.0, host_link_gbps=32.0)


# ------------------------------------------------------------------------------------------------------------ peaks


def matmul_fraction_of_peak(soc: str, n: int = 8192) -> float:
    """An n x n x n float16 matmul's achieved FLOP rate over the cube's float16 peak."""
    a = torch.empty(n, n, dtype=torch.float16, device="meta")
    e = cost.estimate_op("aten::mm", (a, a), {}, [a], soc)
    return e.flops / (e.us * 1e-6) / cost.chip(soc)["cube_fp16_flops"]


def copy_fraction_of_hbm(soc: str, nbytes: float = 2**30) -> float:
    """A device-to-device copy of nbytes: its traffic (read and write) per second over the HBM bandwidth."""
    e = cost.estimate_copy(nbytes, "DtoD", soc)
    return e.bytes / (e.us * 1e-6) / cost.chip(soc)["hbm_bytes_per_s"]


# ------------------------------------------------------------------------------------------------ published results


def _step_us(run: Callable[[], None], soc, graph: bool = False) -> float:
    with cost.estimate(soc, graph=graph) as est:
        run()
    return est.result.step_us


def resnet50_images_per_s() -> float:
    # MindSpore's runs sink the whole training step into the device (graph mode): no host launch per op.
    return 256 / (_step_us(lambda: resnet50.main(["--batch", "256"]), ASCEND_910, graph=True) * 1e-6)


def llama2_7b_tokens_per_s_per_device() -> float:
    # MindSpeed-LLM's configuration: TP 1, PP 2, micro-batch 1 x 4096 tokens, global batch 256 over 8 NPUs (DP 4), so
    # 64 micro-batches per step and per pipeline, the distributed optimizer sharding the update over the 4 DP ranks.
    # Per device: the two pipeline stages share one model's forward and backward of each micro-batch, the bubble adds
    # (pp - 1) / micro-batches, the update is one eighth of the model's once per 64 micro-batches (gradient
    # reduce-scatter: ~3 ms per step, omitted).
    soc, pp, micro_batches, dp = "Ascend910B3", 2, 64, 4
    micro_batch = _step_us(lambda: llama.main(["--phase", "micro-batch"]), soc)
    update = _step_us(lambda: llama.main(["--phase", "optimizer"]), soc)
    per_micro_batch = micro_batch * (1 + (pp - 1) / micro_batches) + update / (dp * micro_batches)
    return 4096 / (per_micro_batch * 1e-6)


def llama_7b_decode_tokens_per_s() -> float:
    # 8 concurrent sequences, 128-token prompts: each decode step makes one token per sequence; the step is estimated
    # mid-generation (256 tokens in the cache). MindIE runs the step as a graph.
    return 1 / (_step_us(lambda: llama.main(["--decode", "8", "--context", "256"]), "Ascend910B3", graph=True) * 1e-6)


@dataclass(frozen=True)
class Published:
    name: str
    figure: float
    unit: str
    source: str
    setup: str
    estimate: Callable[[], float]
    band: float = 1.5  # the estimate must lie within figure / band ... figure x band


PUBLISHED = [
    Published(
        "ResNet-50 v1.5 training, 1 x Ascend 910, batch 256, mixed precision", 2115, "images/s",
        "MindSpore 0.5 benchmark (gitee.com/mindspore/docs, r0.6, docs/source_zh_cn/benchmark.md), ModelArts",
        "first-generation Ascend 910 (ASCEND_910's figures), graph mode (the step sunk to the device); "
        "examples/estimate/resnet50.py: float16 autocast, SGD with momentum",
        resnet50_images_per_s),
    Published(
        "LLaMA2-7B pre-training, MindSpeed-LLM, 1 x 8 Atlas 900 A2 PODc, BF16, 4K sequence", 4241, "tokens/s/device",
        "MindSpeed-LLM (then ModelLink) examples/llama2/README.md, throughput table: 4241 tokens/s/p, 30.9 s/step "
        "(git f78de57a, 2024-06-06; README.md's model table rounds it to 4200 for Atlas 900 A2 PODc); configuration: "
        "examples/llama2/pretrain_llama2_7b_ptd.sh (TP 1, PP 2, micro-batch 1, global batch 256, flash attention, "
        "distributed optimizer)",
        "Ascend910B3 (Atlas A2's 313-TFLOPS NPU); examples/estimate/llama.py: torch_npu's fused RMSNorm, rotary, "
        "SwiGLU; AdamW",
        llama2_7b_tokens_per_s_per_device),
    Published(
        "Llama-7B decode on MindIE, Atlas 800T A2, 8 concurrent requests, 128-token input", 76.1, "tokens/s per request",
        "CANN 8.5 installation guide, BIOS configuration (hiascend.com/document/detail/en/canncommercial/850/"
        "softwareinst/instg/instg_0097.html), table 1, performance mode, average of 3 runs; read as each request's "
        "rate: the step's aggregate would be 8 x 76 = 609 tokens/s (13 ms per step; the 13.5 GB of weights alone take "
        "8.4 ms at 1.6 TB/s)",
        "Ascend910B3, float16, graph mode; examples/estimate/llama.py --decode 8 --context 256",
        llama_7b_decode_tokens_per_s),
]


def main() -> int:
    print("peaks (8192^3 float16 matmul; 1 GiB device-to-device copy):")
    for soc in ("Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910_9392", "Ascend310P3"):
        print(f"  {soc:<16} matmul {matmul_fraction_of_peak(soc) * 100:5.1f}% of cube peak   "
              f"copy {copy_fraction_of_hbm(soc) * 100:5.1f}% of HBM bandwidth")
    print("\npublished results:")
    for p in PUBLISHED:
        estimate = p.estimate()
        ratio = estimate / p.figure
        print(f"  {p.name}\n    published {p.figure:g} {p.unit}; softnpu's estimate {estimate:.1f}; "
              f"ratio {ratio:.2f} (band {1 / p.band:.2f}-{p.band:.2f})\n    source: {p.source}\n    estimated as: {p.setup}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
