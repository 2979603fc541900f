"""Built-in NPU graph handlers of operators that need no preparation at capture, only the update of some arguments
(torch_npu's simple handlers): the context lengths that _npu_paged_attention (a host tensor read at launch) and
npu_multi_head_latent_attention.out (a host int list) take, which
``NPUGraph.update(cpu_update_input=[{"context_lens": ...}])`` replaces before a replay."""

from .npugraph_handler import NpuGraphOpHandler, register_npu_graph_handler


@register_npu_graph_handler(["_npu_paged_attention", "_npu_paged_attention.default",
                             "npu_multi_head_latent_attention.out"])
class _PagedAttentionHandler(NpuGraphOpHandler):
    UPDATE_SPECS = {
        "_npu_paged_attention": [("arg", 7, "context_lens")],
        "_npu_paged_attention.default": [("arg", 7, "context_lens")],
        "npu_multi_head_latent_attention.out": [("arg", 5, "context_lens")],
    }
