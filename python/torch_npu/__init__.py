"""torch_npu, served by softnpu: code written for Huawei's torch_npu runs unchanged on the software NPU."""

import sys

import softnpu
from softnpu import __version__, distributed, npu, optim, profiler, utils  # noqa: F401
from softnpu.fused import *  # noqa: F401,F403  (npu_fusion_attention, npu_rms_norm, ...)
from softnpu.utils import npu_change_data_ptr  # noqa: F401  (torch_npu.npu_change_data_ptr)
from softnpu.exposed_api import public_npu_functions as _public_npu_functions
from softnpu.npu.memory import _erase_stream


def erase_stream(tensor, stream):
    """Undoes tensor.record_stream(stream): freeing the tensor returns its memory to the caching allocator without
    waiting for the work queued on `stream`."""
    _erase_stream(tensor, stream)


# As torch_npu exports every op of the npu namespace, and its ATB ops (the atb namespace), the private ones are
# attributes too (not in __all__): torch_npu._npu_fused_infer_attention_score_get_max_workspace, which graph-capture
# code calls, torch_npu._npu_paged_attention (vLLM-Ascend's).
import torch as _torch  # noqa: E402

for _qualified in _torch._C._dispatch_get_all_op_names():
    _namespace, _, _op = _qualified.partition("::")
    if _namespace in ("npu", "atb") and _op.startswith("_"):
        _op = _op.split(".")[0]
        globals().setdefault(_op, getattr(getattr(_torch.ops, _namespace), _op))
del _qualified, _namespace, _op
# torch_npu.atb: the ATB ops torch_npu exports under that module (npu_multi_head_latent_attention, ...).
from softnpu import atb  # noqa: E402

sys.modules["torch_npu.atb"] = atb

# torch_npu's public names: erase_stream and the ops its build marks exposed (softnpu/exposed_api.py) that softnpu
# registers; the other ops, Format and the format helpers are attributes only, as in torch_npu (which also lists
# HiFloat8Tensor and matmul_checksum, which softnpu does not have). Each has a docstring, as torch_npu's.
__all__ = ["erase_stream", *(name for name in _public_npu_functions if name in globals())]

# torch_npu.npu (torch.npu), torch_npu.profiler, torch_npu.distributed and torch_npu.optim, with their submodules, are
# softnpu's.
for _name, _module in list(sys.modules.items()):
    if _name.split(".")[:2] in (["softnpu", "npu"], ["softnpu", "profiler"], ["softnpu", "distributed"],
                                ["softnpu", "optim"], ["softnpu", "utils"]):
        sys.modules["torch_npu" + _name[len("softnpu"):]] = _module
del _name, _module

# torch_npu.utils.error_code (and its older name, _error_code): ErrCode, pta_error, ...
from softnpu import error_code as _error_code_module  # noqa: E402

sys.modules["torch_npu.utils.error_code"] = sys.modules["torch_npu.utils._error_code"] = _error_code_module
utils.error_code = utils._error_code = _error_code_module

# torch_npu.utils.collect_env (get_cann_version, read by ColossalAI and MindSpeed).
from softnpu import collect_env as _collect_env_module  # noqa: E402

sys.modules["torch_npu.utils.collect_env"] = utils.collect_env = _collect_env_module

# torch_npu.utils.cpp_extension (NpuExtension, load); libtorch_npu.so, libascendcl.so and libopapi.so loaded, so that
# C++ extensions linked against them (csrc/torch_npu_api) resolve to this process's copies.
from softnpu import cpp_extension as _cpp_extension_module  # noqa: E402

_cpp_extension_module.load_libraries()
sys.modules["torch_npu.utils.cpp_extension"] = utils.cpp_extension = _cpp_extension_module

# torch_npu.utils.storage (_rebuild_npu_tensor, named by torch_npu's pickles).
from softnpu import storage as _storage_module  # noqa: E402

sys.modules["torch_npu.utils.storage"] = utils.storage = _storage_module
# torch_npu.distributed.distributed_c10d is torch's, as torch_npu patches torch's.
import torch.distributed.distributed_c10d as _c10d  # noqa: E402

sys.modules["torch_npu.distributed.distributed_c10d"] = distributed.distributed_c10d = _c10d

# torch_npu._C (ProcessGroupHCCL.Options, _storage_Use_Count, _weak_ref_tensor, _cd.DType), and each DType number as
# torch_npu.<name> (torch_npu.hifloat8, torch_npu.float8_e8m0fnu, ...), as torch_npu exports them.
from . import _C  # noqa: E402

for _name, _value in vars(_C._cd.DType).items():
    if not _name.startswith("_"):
        globals()[_name] = _value
del _name, _value
# torch_npu.utils.flops_count (FlopsCounter).
from softnpu import flops_count as _flops_count_module  # noqa: E402

sys.modules["torch_npu.utils.flops_count"] = utils.flops_count = _flops_count_module
# torch_npu.utils._npu_trace (the sanitizer's callbacks) and torch_npu.utils.utils (its log printers).
from softnpu import npu_trace as _npu_trace_module, print_log as _print_log_module  # noqa: E402

sys.modules["torch_npu.utils._npu_trace"] = utils._npu_trace = _npu_trace_module
sys.modules["torch_npu.utils.utils"] = utils.utils = _print_log_module
# torch_npu.utils._path_manager (PathManager).
from softnpu import path_manager as _path_manager_module  # noqa: E402

sys.modules["torch_npu.utils._path_manager"] = utils._path_manager = _path_manager_module
# torch_npu.utils.exposed_api (public_npu_functions).
from softnpu import exposed_api as _exposed_api_module  # noqa: E402

sys.modules["torch_npu.utils.exposed_api"] = utils.exposed_api = _exposed_api_module
# torch_npu._inductor: importing it registers Inductor's npu backend, which softnpu does when it loads.
from softnpu import inductor as _inductor  # noqa: E402

sys.modules["torch_npu._inductor"] = _inductor
# torch_npu._inductor._aclgraph_update_plan (the update plans Inductor writes for NPU graphs).
from softnpu.inductor import _aclgraph_update_plan as _inductor_plan  # noqa: E402

sys.modules["torch_npu._inductor._aclgraph_update_plan"] = _inductor_plan
sys.modules["torch_npu._inductor._aclgraph_update_plan.codegen"] = _inductor_plan.codegen
# torch_npu.utils._dynamo (_dynamo_register_interface_for_device).
from softnpu.inductor import dynamo as _dynamo_module  # noqa: E402

sys.modules["torch_npu.utils._dynamo"] = utils._dynamo = _dynamo_module
