"""A step on the SoC from its kernels' estimates: its time, MFU, and where the time goes per op type with what bounds
it. Built by the estimator (fake tensors) and from a profile (``softnpu.cost.step_summary``) alike."""

from collections import defaultdict
from dataclasses import dataclass, field

from .model import KernelEstimate, chip, factors


@dataclass
class Kernel:
    """One launch of the step and its estimate."""

    op: str  # "aten::mm", "Memcpy HtoD", "hccl:all_reduce"
    estimate: KernelEstimate
    backward: bool = False  # launched by autograd's backward pass (DDP overlaps gradient reduction with it)
    launched: bool = True  # a launch the host pays for (False: a collective of the layout, not an op of the script)
    optimizer: bool = False  # launched by an optimizer's step() (once per iteration under pipeline parallelism)


@dataclass
class OpType:
    """The kernels of one op type in a step."""

    name: str
    calls: int = 0
    us: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    us_by_bound: dict = field(default_factory=lambda: defaultdict(float))

    @property
    def bound(self) -> str:
        """What bounds most of this op type's time."""
        return max(self.us_by_bound.items(), key=lambda item: item[1])[0] if self.us_by_bound else "-"


@dataclass
class Pipeline:
    """One device's iteration of a pipeline-parallel layout under the 1F1B schedule (Megatron's, MindSpeed's default).

    The model's layers are split evenly over ``stages``; each iteration runs ``micro_batches`` micro-batches. A stage
    spends ``stage_us`` on one micro-batch's forward and backward (the step's, over the stages) and ``p2p_us`` sending
    its activation to the next stage and the activation's gradient back to the previous one. 1F1B fills and drains
    the pipeline once an iteration, so every stage idles (stages - 1) micro-batch slots: the iteration is
    (micro_batches + stages - 1) slots, of which the bubble (stages - 1) / (micro_batches + stages - 1) is idle. The
    stage's share of the optimizer step and of the data-parallel gradient reduction follow once an iteration."""

    stages: int
    micro_batches: int
    activation_bytes: float  # what crosses a stage boundary per micro-batch
    stage_us: float
    p2p_us: float
    optimizer_us: float
    grad_reduce_us: float
    model_flops: float  # one micro-batch's forward and backward on one stage

    @property
    def bubble(self) -> float:
        return (self.stages - 1) / (self.micro_batches + self.stages - 1)

    @property
    def iteration_us(self) -> float:
        return ((self.micro_batches + self.stages - 1) * (self.stage_us + self.p2p_us) + self.optimizer_us
                + self.grad_reduce_us)

    def table(self, peak_flops: float) -> str:
        mfu = self.micro_batches * self.model_flops / (self.iteration_us * 1e-6 * peak_flops)
        return (f"  pipeline: {self.stages} stages x {self.micro_batches} micro-batches (1F1B): iteration "
                f"{self.iteration_us / 1e3:.3f} ms, {self.iteration_us / self.micro_batches / 1e3:.3f} ms a "
                f"micro-batch, bubble {self.bubble * 100:.1f}%, MFU {mfu * 100:.1f}%\n"
                f"    a stage: {self.stage_us / 1e3:.3f} ms of forward and backward + {self.p2p_us / 1e3:.3f} ms of "
                f"send/recv ({self.activation_bytes / 1e6:.1f} MB each way) a micro-batch; optimizer "
                f"{self.optimizer_us / 1e3:.3f} ms, gradient reduction {self.grad_reduce_us / 1e3:.3f} ms an iteration")


class StepEstimate:
    """A step's estimated time on the SoC.

    ``device_us``: the kernels back to back on one stream; ``host_us``: the host's launches (eager mode: each op pays
    ``host_launch_us``; a replayed graph pays none); ``exposed_comm_us``: the layout's collectives not hidden behind
    backward compute. ``step_us`` is the longer of device and host, plus exposed communication."""

    def __init__(self, kernels: list[Kernel], soc: str | dict | None = None, graph: bool = False, overlap_comm: bool = True):
        self.kernels = kernels
        self.soc = soc
        self.graph = graph
        compute = [k for k in kernels if k.estimate.unit != "collective"]
        comm = [k for k in kernels if k.estimate.unit == "collective"]
        self.device_us = sum(k.estimate.us for k in compute)
        self.launch_us = dict((name, value) for name, value, _, _ in factors())["host_launch_us"]
        self.launches = sum(1 for k in kernels if k.launched)
        self.host_us = 0.0 if graph else self.launches * self.launch_us
        self.comm_us = sum(k.estimate.us for k in comm)
        # Gradient reduction (collectives of the backward pass) overlaps the backward's compute, as DDP's buckets do;
        # the rest (tensor parallelism's all-reduces inside forward and backward) waits for its results.
        backward_us = sum(k.estimate.us for k in compute if k.backward)
        overlapped = sum(k.estimate.us for k in comm if k.backward) if overlap_comm else 0.0
        self.exposed_comm_us = (self.comm_us - overlapped) + max(0.0, overlapped - backward_us)
        self.step_us = max(self.device_us, self.host_us) + self.exposed_comm_us
        self.cube_flops = sum(k.estimate.flops for k in compute if k.estimate.unit == "cube")
        self.model_flops = sum(k.estimate.model_flops for k in compute)
        self.peak_flops = chip(soc)["cube_fp16_flops"]
        self.chip_name = chip(soc)["name"]
        self.pipeline: Pipeline | None = None

    def split_into_stages(self, stages: int, micro_batches: int, activation_bytes: float, p2p_us: float) -> Pipeline:
        """The step (one micro-batch's forward and backward of the whole model, and the optimizer step if it ran) as
        one device's iteration of a pipeline of ``stages`` over ``micro_batches``; ``p2p_us``: one send/recv of
        ``activation_bytes``."""
        def time(kernels):
            device = sum(k.estimate.us for k in kernels if k.estimate.unit != "collective")
            host = 0.0 if self.graph else sum(1 for k in kernels if k.launched) * self.launch_us
            comm = sum(k.estimate.us for k in kernels if k.estimate.unit == "collective")
            return max(device, host) + comm

        micro_batch = [k for k in self.kernels if not k.optimizer and k.launched]  # with tensor parallelism's
        optimizer = [k for k in self.kernels if k.optimizer]
        gradients = [k for k in self.kernels if not k.launched]  # the layout's data-parallel reduction
        self.pipeline = Pipeline(
            stages, micro_batches, activation_bytes, stage_us=time(micro_batch) / stages, p2p_us=2 * p2p_us,
            optimizer_us=time(optimizer) / stages, grad_reduce_us=time(gradients) / stages,
            model_flops=sum(k.estimate.model_flops for k in micro_batch) / stages)
        return self.pipeline

    @property
    def mfu(self) -> float:
        """Model FLOPs utilization: the model FLOPs (torch's count: no causal discount, no recomputation) over the
        step's time at the cube's float16/bfloat16 peak."""
        return self.model_flops / (self.step_us * 1e-6 * self.peak_flops) if self.step_us > 0 else 0.0

    @property
    def bound(self) -> str:
        """What bounds the step: the host's launches, exposed communication, or the device's compute or memory."""
        if self.host_us > self.device_us and self.host_us >= self.exposed_comm_us:
            return "launch"
        if self.exposed_comm_us > self.device_us:
            return "communication"
        by_bound = defaultdict(float)
        for k in self.kernels:
            if k.estimate.unit != "collective":
                by_bound[k.estimate.bound] += k.estimate.us
        return max(by_bound.items(), key=lambda item: item[1])[0] if by_bound else "-"

    def by_op_type(self) -> list[OpType]:
        """The op types, longest first."""
        types: dict[str, OpType] = {}
        for k in self.kernels:
            t = types.setdefault(k.op, OpType(k.op))
            t.calls += 1
            t.us += k.estimate.us
            t.flops += k.estimate.flops
            t.bytes += k.estimate.bytes
            t.us_by_bound[k.estimate.bound] += k.estimate.us
        return sorted(types.values(), key=lambda t: -t.us)

    def table(self, row_limit: int = 20) -> str:
        """The step's summary and its op types, as text."""
        mode = "graph (no host launch cost)" if self.graph else "eager"
        lines = [
            f"estimated step on {self.chip_name} ({mode}): {self.step_us / 1e3:.3f} ms, bound: {self.bound}, "
            f"MFU {self.mfu * 100:.1f}%",
            f"  device {self.device_us / 1e3:.3f} ms in {sum(1 for k in self.kernels if k.estimate.unit != 'collective')}"
            f" kernels; host launches {self.host_us / 1e3:.3f} ms ({self.launches}); communication "
            f"{self.comm_us / 1e3:.3f} ms ({self.exposed_comm_us / 1e3:.3f} ms exposed); cube "
            f"{self.cube_flops / 1e12:.2f} TFLOP",
        ]
        if self.pipeline is not None:
            lines.append(self.pipeline.table(self.peak_flops))
        lines.append(f"  {'op type':<60}{'calls':>7}{'est. ms':>10}{'%':>6}{'TFLOP':>9}{'GB':>9}  bound")
        total = sum(t.us for t in self.by_op_type()) or 1.0
        types = self.by_op_type()
        for t in types[:row_limit]:
            lines.append(f"  {t.name[:59]:<60}{t.calls:>7}{t.us / 1e3:>10.3f}{t.us / total * 100:>6.1f}"
                         f"{t.flops / 1e12:>9.3f}{t.bytes / 1e9:>9.3f}  {t.bound}")
        if len(types) > row_limit:
            rest = types[row_limit:]
            lines.append(f"  {'(' + str(len(rest)) + ' more op types)':<60}{sum(t.calls for t in rest):>7}"
                         f"{sum(t.us for t in rest) / 1e3:>10.3f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
