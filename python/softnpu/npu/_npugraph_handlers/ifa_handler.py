"""Built-in NPU graph handlers of inference attention (torch_npu's IFA handlers): npu_fused_infer_attention_score
(v1) and npu_fused_infer_attention_score_v2, whose per-step lengths ``NPUGraph.update(cpu_update_input=[{...}])``
replaces before a replay (v1: actual_seq_lengths, actual_seq_lengths_kv; v2: actual_seq_qlen, actual_seq_kvlen).

A functional call is captured as its .out overload with outputs allocated in the capture (from the graph's pool):
an update relaunches the op into the same tensors, which the caller holds, rather than into new ones.

The .out overloads are composites of an in-place kernel (_npu_fused_infer_attention_score(_v2)_out_), which is what
the capture's dispatch mode sees when a caller calls .out itself; that kernel has a handler of its own that only
updates arguments. The lengths are keyword-only arguments, updated by name ("kwarg" specs); the ("arg", index)
specs are torch_npu's positions, kept so that its public UPDATE_SPECS read the same."""

import torch
from torch.utils import _pytree

from .npugraph_handler import NpuGraphOpHandler, register_npu_graph_handler


def _on_meta(value):
    return torch.empty_like(value, device="meta") if isinstance(value, torch.Tensor) else value


def _specs(names, torch_npu_positions, keys):
    specs = [*torch_npu_positions, *(("kwarg", key, key) for key in keys)]
    return {name: specs for name in names}


class _CaptureAsOut(NpuGraphOpHandler):
    """A functional call becomes its .out overload with outputs of the shapes and dtypes its Meta kernel gives;
    the caller gets those outputs."""

    WORKSPACE_OP = ""  # the npu op of the workspace query (torch_npu passes its result to .out)

    @classmethod
    def prepare_capture(cls, func, args, kwargs):
        if func._overloadname == "out":
            return func, args, kwargs
        shapes = func(*_pytree.tree_map(_on_meta, args), **_pytree.tree_map(_on_meta, dict(kwargs)))
        out = [torch.empty_like(t, device=args[0].device) for t in shapes]
        workspace = getattr(torch.ops.npu, cls.WORKSPACE_OP)(*args, **kwargs)
        return func.overloadpacket.out, args, dict(kwargs, workspace=workspace, out=out)

    @classmethod
    def postprocess_result(cls, result, kwargs):
        return tuple(kwargs["out"])


_V1 = ["npu_fused_infer_attention_score", "npu_fused_infer_attention_score.default",
       "npu_fused_infer_attention_score.out"]
_V1_KERNEL = ["_npu_fused_infer_attention_score_out_", "_npu_fused_infer_attention_score_out_.default"]
_V1_KEYS = ("actual_seq_lengths", "actual_seq_lengths_kv")
_V2 = ["npu_fused_infer_attention_score_v2", "npu_fused_infer_attention_score_v2.default",
       "npu_fused_infer_attention_score_v2.out"]
_V2_KERNEL = ["_npu_fused_infer_attention_score_v2_out_", "_npu_fused_infer_attention_score_v2_out_.default"]
_V2_KEYS = ("actual_seq_qlen", "actual_seq_kvlen")


@register_npu_graph_handler(_V1)
class _IFAv1Handler(_CaptureAsOut):
    UPDATE_SPECS = _specs(_V1, [("arg", 5, "actual_seq_lengths"), ("arg", 6, "actual_seq_lengths_kv")], _V1_KEYS)
    WORKSPACE_OP = "_npu_fused_infer_attention_score_get_max_workspace"


@register_npu_graph_handler(_V1_KERNEL)
class _IFAv1OutKernelHandler(NpuGraphOpHandler):
    UPDATE_SPECS = _specs(_V1_KERNEL, [], _V1_KEYS)


@register_npu_graph_handler(_V2)
class _IFAv2Handler(_CaptureAsOut):
    UPDATE_SPECS = _specs(_V2, [("arg", 7, "actual_seq_qlen"), ("arg", 8, "actual_seq_kvlen")], _V2_KEYS)
    WORKSPACE_OP = "_npu_fused_infer_attention_score_v2_get_max_workspace"


@register_npu_graph_handler(_V2_KERNEL)
class _IFAv2OutKernelHandler(NpuGraphOpHandler):
    UPDATE_SPECS = _specs(_V2_KERNEL, [], _V2_KEYS)


def _npu_fused_infer_attention_score_out_graph(stream, handle, event, *args, **kwargs):
    """torch_npu._C._npu_fused_infer_attention_score_out_graph: the manual update of a captured task group that holds
    npu_fused_infer_attention_score.out, in one call: the group's replacement recorded on `stream` (the .out call with
    the new arguments, into out=[attention_out, softmax_lse]) and `event` recorded after it, for the graph's
    ExternalEvent wait. Returns the two outputs."""
    from ..graphs import graph_task_update_begin, graph_task_update_end  # graphs imports this package

    out = kwargs.get("out")
    if out is None or len(out) != 2:
        raise RuntimeError("out must have 2 tensors (attention_out, softmax_lse), but got "
                           f"{'none' if out is None else len(out)}")
    graph_task_update_begin(stream, handle)
    result = torch.ops.npu.npu_fused_infer_attention_score.out(*args, **kwargs)
    graph_task_update_end(stream)
    event.record(stream)
    return result
