"""An ACL graph update plan and how it is checked and resolved (torch_npu's contract).

A plan is a list with one entry per op recorded by the graph's dispatch mode (NPUGraph(auto_dispatch_capture=True)),
in capture order: {"op": "<op>.<overload>", "updates": {key: source}}, where key is an update key of the op's handler
(its UPDATE_SPECS, or a keyword the recorded call has) and source says where the value comes from at each call:

    {"kind": "input", "index": i}       the i-th input of the call
    {"kind": "constant", "value": v}    a Python scalar or string (or a list of them)
    {"kind": "none"}                    None
    {"kind": "list", "items": [...]}    a list of the items' values

Resolving a plan against a call's inputs gives NPUGraph.update's cpu_update_input (one dict per recorded op). A plan
holds only plain data (it is written into Inductor's generated code as a literal), so no tensor is ever a constant."""

from typing import Any, Dict, List, Sequence

from ...error_code import ErrCode, pta_error
from .._npugraph_handlers.npugraph_handler import _NPU_GRAPH_OP_HANDLERS

# The attribute of a compiled graph's launcher (Inductor's `call`) that holds its plan.
ACLGRAPH_UPDATE_PLAN_GLOBAL = "_torch_npu_aclgraph_update_plan"

_OVERLOAD_SUFFIXES = (".default", ".out")


def _error(message: str) -> RuntimeError:
    return RuntimeError(message + pta_error(ErrCode.PARAM))


def _packet_name(op_name: str) -> str:
    for suffix in _OVERLOAD_SUFFIXES:
        if op_name.endswith(suffix):
            return op_name[:-len(suffix)]
    return op_name


def _same_op(planned: str, recorded: str) -> bool:
    # A functional call is recorded as its .out overload (the handler's prepare_capture), while the plan, written
    # from the traced graph, names the functional one: the two overloads are the same op for a plan.
    return _packet_name(planned) == _packet_name(recorded)


def _get_update_specs(handler: Any, op_name: str) -> List[Any]:
    """A handler's update specs for op_name: its get_update_specs, or, for handlers that only declare them,
    its UPDATE_SPECS."""
    if hasattr(handler, "get_update_specs"):
        return handler.get_update_specs(op_name)
    return getattr(handler, "UPDATE_SPECS", {}).get(op_name, [])


def _recorded_op_name(record: Any) -> str:
    return record.op_cache_entry.__name__


def _keys_the_record_takes(record: Any) -> set:
    op_name = _recorded_op_name(record)
    keys = set(getattr(record, "kwargs", {}))
    handler = _NPU_GRAPH_OP_HANDLERS.get(op_name)
    if handler is not None:
        keys.update(spec[2] for spec in _get_update_specs(handler, op_name))
    return keys


def _where(entry_idx: int, key: str) -> str:
    return f"ACLGraph update plan entry {entry_idx} key {key}"


def _resolve(entry_idx: int, key: str, source: Any, inputs: Sequence[Any]) -> Any:
    if not isinstance(source, dict):
        raise _error(f"{_where(entry_idx, key)} has invalid source {source!r}")
    kind = source.get("kind")
    if kind == "input":
        index = source.get("index")
        if not isinstance(index, int) or not 0 <= index < len(inputs):
            raise _error(f"{_where(entry_idx, key)} input index {index!r} is out of range for {len(inputs)} inputs")
        return inputs[index]
    if kind == "constant":
        return source.get("value")
    if kind == "none":
        return None
    if kind == "list":
        return [_resolve(entry_idx, key, item, inputs) for item in _list_items(entry_idx, key, source)]
    raise _error(f"{_where(entry_idx, key)} has unsupported source kind {kind!r}")


def _list_items(entry_idx: int, key: str, source: dict) -> list:
    items = source.get("items")
    if not isinstance(items, list):
        raise _error(f"{_where(entry_idx, key)} has invalid list source items {items!r}")
    return items


def resolve_aclgraph_update_plan(plan: Sequence[Dict[str, Any]], new_inputs: Sequence[Any]) -> List[Dict[str, Any]]:
    """cpu_update_input for NPUGraph.update: each entry's updates with their sources read from new_inputs (the
    call's inputs, before Inductor's boxed calling convention clears them)."""
    return [{key: _resolve(entry_idx, key, source, new_inputs) for key, source in entry.get("updates", {}).items()}
            for entry_idx, entry in enumerate(plan or [])]


def _check_literal(value: Any) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        raise _error("Unsupported ACLGraph update Tensor constant; Tensor update values must be graph inputs")
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_literal(item)
    elif value is not None and not isinstance(value, (int, float, bool, str)):
        raise _error(f"Unsupported ACLGraph update constant: {value!r}")


def _check_source(entry_idx: int, key: str, source: Any) -> None:
    if not isinstance(source, dict):
        raise _error(f"{_where(entry_idx, key)} has invalid source {source!r}")
    kind = source.get("kind")
    if kind == "input":
        index = source.get("index")
        if not isinstance(index, int) or index < 0:
            raise _error(f"{_where(entry_idx, key)} has invalid input index {index!r}")
    elif kind == "constant":
        try:
            _check_literal(source.get("value"))
        except RuntimeError as error:
            raise _error(f"{_where(entry_idx, key)} has unsupported constant value {source.get('value')!r}") \
                from error
    elif kind == "list":
        for item in _list_items(entry_idx, key, source):
            _check_source(entry_idx, key, item)
    elif kind != "none":
        raise _error(f"{_where(entry_idx, key)} has unsupported source kind {kind!r}")


def _check_entry(entry_idx: int, entry: Any, record: Any) -> None:
    if not isinstance(entry, dict):
        raise _error(f"ACLGraph update plan has invalid plan entry at index {entry_idx}: {entry!r}")
    planned, recorded = entry.get("op"), _recorded_op_name(record)
    if not isinstance(planned, str):
        raise _error(f"ACLGraph update plan has invalid plan entry: entry {entry_idx} op must be a string, "
                     f"got {planned!r}")
    if not _same_op(planned, recorded):
        raise _error(f"ACLGraph update plan op mismatch: entry {entry_idx} expects {planned!r}, "
                     f"captured {recorded!r}")
    updates = entry.get("updates", {})
    if not isinstance(updates, dict):
        raise _error(f"ACLGraph update plan has invalid plan entry: entry {entry_idx} updates must be a dict, "
                     f"got {updates!r}")
    if not updates:
        raise _error(f"ACLGraph update plan entry has no updates: entry {entry_idx}, op {recorded!r}")
    unknown = sorted(set(updates) - _keys_the_record_takes(record))
    if unknown:
        raise _error(f"ACLGraph update plan has key(s) that captured op cannot consume: entry {entry_idx}, "
                     f"op {recorded!r}, keys {unknown}")
    for key, source in updates.items():
        _check_source(entry_idx, key, source)


def validate_aclgraph_update_plan(plan: Sequence[Dict[str, Any]], graph_dispatch_records: Sequence[Any]) -> None:
    """Checks that plan describes the ops a capture recorded (graph_dispatch_records, NPUGraph's
    graph_dispatch_mode.graph_dispatch_records): one entry per record, of the same op, with keys the record takes
    and well-formed sources. RuntimeError otherwise."""
    plan = plan or []
    if not plan and graph_dispatch_records:
        raise _error(
            f"Captured updatable ACLGraph operators but missing ACLGraph update plan: "
            f"{[_recorded_op_name(r) for r in graph_dispatch_records]}. This may be caused by reusing cached "
            "compiled code generated with ACLGraph disabled, or by a backend that writes no ACLGraph update plan.")
    if len(plan) != len(graph_dispatch_records):
        raise _error(f"ACLGraph update plan length mismatch: plan has {len(plan)} entries but graph captured "
                     f"{len(graph_dispatch_records)} updatable records")
    for entry_idx, (entry, record) in enumerate(zip(plan, graph_dispatch_records)):
        _check_entry(entry_idx, entry, record)


def build_cpu_update_input_for_graph(plan: Sequence[Dict[str, Any]], new_inputs: Sequence[Any],
                                     graph_dispatch_records: Sequence[Any]) -> List[Dict[str, Any]]:
    """Validates plan against the records, then resolves it against new_inputs."""
    validate_aclgraph_update_plan(plan, graph_dispatch_records)
    return resolve_aclgraph_update_plan(plan, new_inputs)


def validate_aclgraph_update_plan_for_graph(plan: Sequence[Dict[str, Any]], graph: Any) -> None:
    """validate_aclgraph_update_plan against what an NPUGraph recorded (nothing to check unless it was captured with
    auto_dispatch_capture=True)."""
    if graph is not None and graph.auto_dispatch_capture:
        validate_aclgraph_update_plan(plan, graph.graph_dispatch_mode.graph_dispatch_records)


def update_aclgraph_records_for_graph(cpu_update_input: Sequence[Dict[str, Any]], graph: Any) -> bool:
    """NPUGraph.update(cpu_update_input) when the graph recorded updatable ops and there is something to update;
    whether it did (the update applies to the replays launched after it)."""
    if graph is None or not graph.auto_dispatch_capture or not cpu_update_input:
        return False
    graph.update(cpu_update_input)
    return True
