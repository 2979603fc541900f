"""torch_npu._inductor._aclgraph_update_plan: the ACL graph update plan Inductor writes beside each compiled graph
(codegen.py); the plan's format and its use at replay are torch.npu's (softnpu/npu/_aclgraph_update_plan/)."""

from ...npu._aclgraph_update_plan import ACLGRAPH_UPDATE_PLAN_GLOBAL
from .codegen import append_inductor_aclgraph_update_plan_for_codegen_node, emit_inductor_aclgraph_update_plan_for_wrapper

__all__ = [
    "ACLGRAPH_UPDATE_PLAN_GLOBAL",
    "append_inductor_aclgraph_update_plan_for_codegen_node",
    "emit_inductor_aclgraph_update_plan_for_wrapper",
]
