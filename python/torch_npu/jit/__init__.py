"""torch_npu.jit: TorchScript graph passes that put torch_npu's fused ops in place of the ATen ops they fuse.

optimize(jit_mod) rewrites a traced or scripted module's graph in place: gelu (approximate='none') becomes
npu::fast_gelu (x * sigmoid(1.702 x), torch_npu's FastGelu, csrc/fused/activations/fast_gelu.cpp), as torch_npu's
fast_gelu pass. As torch_npu, a ScriptModule also goes through torch.jit.optimize_for_inference, which puts it in
eval mode; the frozen copy that returns is dropped, so the graph rewritten is the module's own."""

import torch

__all__ = ["optimize"]

# (pattern, replacement) TorchScript IR pairs for torch's subgraph rewriter.
_FAST_GELU = ("""
    graph(%x):
        %approximate = prim::Constant[value='none']()
        %out = aten::gelu(%x, %approximate)
        return (%out)
""", """
    graph(%x):
        %out = npu::fast_gelu(%x)
        return (%out)
""")


def optimize(jit_mod) -> None:
    """Rewrites jit_mod's graph in place with torch_npu's fusion passes."""
    if isinstance(jit_mod, torch.jit.ScriptModule):
        torch.jit.optimize_for_inference(jit_mod)
    pattern, replacement = _FAST_GELU
    torch._C._jit_pass_custom_pattern_based_rewrite_graph(pattern, replacement, jit_mod.graph)
