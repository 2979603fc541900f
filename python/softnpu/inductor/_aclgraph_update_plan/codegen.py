"""The ACL graph update plan of a compiled graph, written by Inductor's wrapper codegen (torch_npu's contract).

While the wrapper generates the calls of extern ops (FallbackKernel, ExternKernelAlloc), each op that has an
NpuGraphOpHandler gets a plan entry: its handler's update keys, bound by the op's schema to the values the traced
graph passes, each value written as its source: a graph input (by its position in the launcher's args), a constant,
None, or a list of those. The plan is then written into the generated module as an attribute of the launcher
(`call._torch_npu_aclgraph_update_plan = [...]`), where reduce-overhead's NPU graphs read it. Plans are written only
when the compiled graph is to be replayed as a graph (Inductor's cudagraphs and graph trees on, not disabled)."""

from typing import Any, Dict, Optional, Sequence

from ...error_code import ErrCode, pta_error
from ...npu._aclgraph_update_plan.resolver import ACLGRAPH_UPDATE_PLAN_GLOBAL, _get_update_specs, _packet_name
from ...npu._npugraph_handlers.npugraph_handler import _NPU_GRAPH_OP_HANDLERS

# torch_npu does not update FlashAttention v3 (and its gradient) in the BNSD layout: its lengths are only read in
# the TND layout.
_NOT_UPDATED_IN_BNSD = {"npu_fusion_attention_v3", "npu_fusion_attention_grad_v3"}


def _error(message: str) -> RuntimeError:
    return RuntimeError(message + pta_error(ErrCode.PARAM))


def _literal_source(value: Any) -> Dict[str, Any]:
    import torch

    if isinstance(value, torch.Tensor):
        raise _error("Unsupported ACLGraph update Tensor constant; Tensor update values must be graph inputs")
    if value is None:
        return {"kind": "none"}
    if isinstance(value, (int, float, bool, str)):
        return {"kind": "constant", "value": value}
    raise _error(f"Unsupported ACLGraph update source: {value!r}")


def _symbolic(value: Any) -> Any:
    """value's sympy expression (a SymInt's, or value itself when it is one), else None."""
    import sympy
    import torch

    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return value.node.expr
    return None


def _ir_name(value: Any) -> Optional[str]:
    """The buffer name of an Inductor IR value (through views and boxes), None for anything else."""
    import torch

    if isinstance(value, torch.Tensor):
        return None
    get_name = getattr(value, "get_name", None)
    if get_name is not None:
        try:
            return get_name()
        except (AttributeError, NotImplementedError):
            pass
    data = getattr(value, "data", None)
    if data is not None and data is not value:
        name = _ir_name(data)
        if name is not None:
            return name
    if hasattr(value, "unwrap_view"):
        try:
            return _ir_name(value.unwrap_view())
        except (AttributeError, NotImplementedError):
            pass
    return None


def _input_index(value: Any, graph_input_names: Sequence[str], graph_inputs: Dict[str, Any]) -> Optional[int]:
    """The position among the launcher's args of the graph input value is: the same buffer, the same object, or a
    size (symbol) equal to it."""
    names = list(graph_input_names)
    name = _ir_name(value)
    if name in names:
        return names.index(name)
    expr = _symbolic(value)
    for index, input_name in enumerate(names):
        graph_input = graph_inputs.get(input_name)
        if graph_input is value:
            return index
        input_expr = _symbolic(graph_input)
        if expr is not None and input_expr is not None and _equal(expr, input_expr):
            return index
    return None


def _equal(lhs: Any, rhs: Any) -> bool:
    import sympy

    try:
        return sympy.simplify(lhs - rhs) == 0
    except (TypeError, ValueError, AttributeError):
        return lhs == rhs


def _source(value: Any, graph_input_names: Sequence[str], graph_inputs: Dict[str, Any]) -> Dict[str, Any]:
    index = _input_index(value, graph_input_names, graph_inputs)
    if index is not None:
        return {"kind": "input", "index": index}
    if isinstance(value, (list, tuple)):
        return {"kind": "list", "items": [_source(item, graph_input_names, graph_inputs) for item in value]}
    return _literal_source(value)


def _bind(op_overload: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The op's arguments by schema name: positional ones by position, the others from kwargs."""
    schema = getattr(op_overload, "_schema", None)
    if schema is None:
        return {}
    bound = {}
    for position, argument in enumerate(schema.arguments):
        if position < len(args):
            bound[argument.name] = args[position]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
    return bound


def build_aclgraph_update_plan_entry_for_inductor(op_overload: Any, args: Sequence[Any], kwargs: Dict[str, Any],
                                                  graph_input_names: Sequence[str],
                                                  graph_inputs: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The plan entry of one extern op call of the graph being compiled, or None when the op is not updated in a
    graph (no handler, the handler's should_handle declines, or nothing of it is updatable)."""
    op_name = getattr(op_overload, "__name__", str(op_overload))
    handler = _NPU_GRAPH_OP_HANDLERS.get(op_name)
    if handler is None:
        return None
    if hasattr(handler, "should_handle") and not handler.should_handle(op_overload, args, kwargs):
        return None
    bound = _bind(op_overload, args, kwargs)
    if _packet_name(op_name) in _NOT_UPDATED_IN_BNSD and bound.get("input_layout") == "BNSD":
        return None
    keys = {spec[2] for spec in _get_update_specs(handler, op_name)}
    updates = {key: _source(value, graph_input_names, graph_inputs) for key, value in bound.items() if key in keys}
    return {"op": op_name, "updates": updates} if updates else None


def should_generate_inductor_aclgraph_update_plan() -> bool:
    from torch._inductor import config
    from torch._inductor.virtualized import V

    return bool(config.triton.cudagraphs and config.triton.cudagraph_trees
                and getattr(V.graph, "disable_cudagraphs_reason", None) is None)


def append_inductor_aclgraph_update_plan_for_codegen_node(wrapper: Any, node: Any) -> None:
    """Adds node's entry (an extern op call being generated) to wrapper's plan."""
    op_overload = getattr(node, "op_overload", None)
    if op_overload is None or not should_generate_inductor_aclgraph_update_plan():
        return
    if hasattr(node, "unflatten_args"):
        args, kwargs = node.unflatten_args(node.inputs, node.constant_args)
    else:
        args, kwargs = [*node.inputs, *node.constant_args], getattr(node, "kwargs", {})
    entry = build_aclgraph_update_plan_entry_for_inductor(op_overload, args, kwargs, wrapper.get_graph_input_names(),
                                                          wrapper.get_graph_inputs())
    if entry is not None:
        if not hasattr(wrapper, "torch_npu_aclgraph_update_plan"):
            wrapper.torch_npu_aclgraph_update_plan = []
        wrapper.torch_npu_aclgraph_update_plan.append(entry)


def emit_inductor_aclgraph_update_plan_for_wrapper(wrapper: Any, result: Any, is_graph_partition_subgraph: bool) -> None:
    """Writes wrapper's plan as an attribute of the function an NPU graph records: a graph partition's function
    (torch_npu's graph trees record each partition), else the module's launcher. softnpu's reduce-overhead records
    the launcher whole (npu_graphs.py), which under graph partitions is the method Runner.call, read through the
    bound `call` the module exports."""
    from torch._inductor import config

    plan = getattr(wrapper, "torch_npu_aclgraph_update_plan", [])
    if not plan or not should_generate_inductor_aclgraph_update_plan():
        return
    launcher = wrapper.launcher_fn_name
    if config.graph_partition and not is_graph_partition_subgraph:
        launcher = f"Runner.{launcher}"
    result.writeline(f"{launcher}.{ACLGRAPH_UPDATE_PLAN_GLOBAL} = {plan!r}")
