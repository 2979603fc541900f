"""The estimates in a torch.profiler profile of npu work: each kernel of the trace carries its estimate on the SoC
(Chrome trace arg ``"Estimated Duration(us)"``, written by the C++ profiler from the cost model at launch); these
helpers put them beside torch's measured figures per op, and sum a profiled step as the estimator does.

torch's ``EventList.key_averages().table(sort_by=...)`` accepts only its own keys, so ``key_averages`` here returns
rows of its own, sortable by the estimate, and ``table`` prints them as torch's table does."""

from dataclasses import dataclass

from torch.autograd import DeviceType

from .. import _C
from .model import KernelEstimate
from .report import Kernel, StepEstimate

ESTIMATE_ARG = "Estimated Duration(us)"  # the Chrome trace arg (and torch_npu's kernel_details.csv column)


@dataclass
class EstimatedOp:
    """One op's kernels in a profile: measured on softnpu and estimated on the SoC."""

    key: str
    count: int = 0  # kernels launched
    device_time_total: float = 0.0  # us, measured (softnpu's compute threads)
    estimated_device_time_total: float = 0.0  # us on the SoC
    flops: float = 0.0
    bound: str = "-"


def _kernels(prof):
    """(op name, measured us, estimate) of each npu kernel of the profile that has an estimate."""
    estimates = {launch: KernelEstimate(**e) for launch, e in _C._cost_trace_estimates().items()}
    events = prof.events()
    # Host ops are the CPU events linked to nothing (launch events on the CPU link to their op, and their ids are
    # launch ids, which may equal an op's).
    ops = {e.id: e for e in events if e.device_type == DeviceType.CPU and getattr(e, "linked_correlation_id", 0) == 0}
    for e in events:
        if e.device_type != DeviceType.PrivateUse1 or e.id not in estimates:
            continue
        op = ops.get(getattr(e, "linked_correlation_id", 0))
        yield (op.key if op is not None else e.name), e.time_range.elapsed_us(), estimates[e.id]


def key_averages(prof, sort_by: str = "estimated_device_time_total") -> list[EstimatedOp]:
    """The profile's ops with their kernels' measured and estimated device time, sorted by ``sort_by`` (an
    EstimatedOp field; largest first)."""
    rows: dict[str, EstimatedOp] = {}
    by_bound: dict[str, dict[str, float]] = {}
    for key, measured, estimate in _kernels(prof):
        row = rows.setdefault(key, EstimatedOp(key))
        row.count += 1
        row.device_time_total += measured
        row.estimated_device_time_total += estimate.us
        row.flops += estimate.flops
        bounds = by_bound.setdefault(key, {})
        bounds[estimate.bound] = bounds.get(estimate.bound, 0.0) + estimate.us
    for key, row in rows.items():
        row.bound = max(by_bound[key].items(), key=lambda item: item[1])[0]
    if sort_by not in EstimatedOp.__dataclass_fields__:
        raise ValueError(f"sort_by must be a field of EstimatedOp ({', '.join(EstimatedOp.__dataclass_fields__)}), "
                         f"got {sort_by!r}")
    return sorted(rows.values(), key=lambda r: getattr(r, sort_by), reverse=True)


def table(prof, sort_by: str = "estimated_device_time_total", row_limit: int = 20) -> str:
    """``key_averages`` as text: each op's measured (softnpu) and estimated (SoC) device time."""
    rows = key_averages(prof, sort_by)
    lines = [f"{'Name':<48}{'# kernels':>10}{'NPU total (measured)':>22}{'Estimated total (SoC)':>23}{'bound':>10}"]
    for r in rows[:row_limit]:
        lines.append(f"{r.key[:47]:<48}{r.count:>10}{r.device_time_total:>20.1f}us"
                     f"{r.estimated_device_time_total:>21.1f}us{r.bound:>10}")
    lines.append(f"{'Total':<48}{sum(r.count for r in rows):>10}{sum(r.device_time_total for r in rows):>20.1f}us"
                 f"{sum(r.estimated_device_time_total for r in rows):>21.1f}us")
    return "\n".join(lines)


def step_summary(prof, soc: str | dict | None = None) -> StepEstimate:
    """The profiled kernels as one step on the SoC (eager: each kernel a host launch)."""
    return StepEstimate([Kernel(key, estimate) for key, _, estimate in _kernels(prof)], soc=soc)
