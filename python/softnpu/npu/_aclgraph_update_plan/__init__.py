"""torch_npu's ACL graph update plans (torch_npu.npu._aclgraph_update_plan): which arguments of the ops a graph
captured through their NpuGraphOpHandlers (the attention ops' sequence lengths) come from which graph inputs, so that
each replay updates them from that call's inputs (resolver.py). Inductor writes a plan beside each compiled graph
(softnpu/inductor/_aclgraph_update_plan/); reduce-overhead's graph trees apply it (NPUGraphNode, softnpu/npu/_graph_tree.py)."""

from .resolver import (
    ACLGRAPH_UPDATE_PLAN_GLOBAL,
    build_cpu_update_input_for_graph,
    resolve_aclgraph_update_plan,
    update_aclgraph_records_for_graph,
    validate_aclgraph_update_plan,
    validate_aclgraph_update_plan_for_graph,
)

__all__ = [
    "ACLGRAPH_UPDATE_PLAN_GLOBAL",
    "build_cpu_update_input_for_graph",
    "resolve_aclgraph_update_plan",
    "update_aclgraph_records_for_graph",
    "validate_aclgraph_update_plan",
    "validate_aclgraph_update_plan_for_graph",
]
