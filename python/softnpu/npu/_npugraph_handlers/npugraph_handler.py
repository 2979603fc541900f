"""torch_npu's NPU graph operator handlers: the registry that says how an operator is recorded in a captured graph
and how a later update rewrites its arguments (torch.npu.NpuGraphOpHandler, torch.npu.register_npu_graph_handler).
A handler is a class whose hooks are classmethods; the registry maps an operator's dispatch name ("my_op",
"my_op.default") to the class. UPDATE_SPECS declares which update keys an operator takes and where they go:
{op_name: [("arg", index, key) or ("kwarg", name, key), ...]}."""

import logging

logger = logging.getLogger(__name__)

_NPU_GRAPH_OP_HANDLERS: dict = {}


class NpuGraphOpHandler:
    """Base class of operator handlers (stateless: every hook is a classmethod)."""

    UPDATE_SPECS: dict = {}

    @classmethod
    def prepare_capture(cls, func, args, kwargs):
        """Before the operator is recorded: may swap func (e.g. for its out= overload) and its arguments."""
        return func, args, kwargs

    @classmethod
    def postprocess_result(cls, result, kwargs):
        """What the caller gets back after recording."""
        return result

    @classmethod
    def get_update_specs(cls, op_name):
        return cls.UPDATE_SPECS.get(op_name, [])

    @classmethod
    def update_args(cls, dispatch_record, update_input):
        """Writes the values of update_input into the recorded call, where UPDATE_SPECS says."""
        for loc, idx_or_name, key in cls.get_update_specs(dispatch_record.op_cache_entry.__name__):
            if key not in update_input:
                continue
            if loc == "arg":
                if len(dispatch_record.args) > idx_or_name:
                    dispatch_record.args[idx_or_name] = update_input[key]
            elif loc == "kwarg":
                dispatch_record.kwargs[idx_or_name] = update_input[key]


def register_npu_graph_handler(op_names):
    """Class decorator: registers the handler class for one operator name or a list of them."""

    def decorator(cls):
        for name in op_names if isinstance(op_names, (list, tuple)) else [op_names]:
            if name in _NPU_GRAPH_OP_HANDLERS:
                logger.warning("NpuGraphOpHandler for '%s' is being overridden: %s -> %s", name,
                               _NPU_GRAPH_OP_HANDLERS[name].__name__, cls.__name__)
            _NPU_GRAPH_OP_HANDLERS[name] = cls
        return cls

    return decorator


__all__ = ["NpuGraphOpHandler", "register_npu_graph_handler"]
