"""softnpu.cost: how long the program would take on the Ascend chip the device presents as.

One cost model (C++, ``csrc/backend/cost/``) over the SoC table (``csrc/common/soc_profiles.def``) and a few global
factors (``csrc/common/cost_factors.def``) estimates each kernel the op path launches. Its estimates reach users in
two ways:

- the profiler: each npu kernel in a torch.profiler trace carries ``"Estimated Duration(us)"`` beside its measured
  duration; ``table(prof)`` / ``key_averages(prof)`` sort the ops by it, ``step_summary(prof)`` sums a step;
- the estimator: ``with estimate() as est:`` runs code on fake npu tensors (no memory, no computation) and
  ``est.result`` gives the step's time, MFU and bound per op type; ``softnpu estimate SCRIPT`` does it for a script.

See docs/cost_model.md for the model, its sources and its validation.
"""

from .estimator import active, estimate, pipeline_boundary, step
from .model import KernelEstimate, chip, estimate_collective, estimate_copy, estimate_op, factors, soc_table
from .profile import ESTIMATE_ARG, EstimatedOp, key_averages, step_summary, table
from .report import Kernel, OpType, Pipeline, StepEstimate

__all__ = [
    "ESTIMATE_ARG",
    "EstimatedOp",
    "Kernel",
    "KernelEstimate",
    "OpType",
    "Pipeline",
    "StepEstimate",
    "active",
    "chip",
    "estimate",
    "estimate_collective",
    "estimate_copy",
    "estimate_op",
    "factors",
    "key_averages",
    "pipeline_boundary",
    "soc_table",
    "step",
    "step_summary",
    "table",
]
