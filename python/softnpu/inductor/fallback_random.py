"""Random numbers in npu graphs come from ATen's random kernels (Inductor's ``config.fallback_random``).

By default Inductor replaces ``rand``, ``bernoulli`` and dropout with its own generator: in C++ kernels, a Philox
engine built for every element, one element at a time (``normalized_rand_cpu``). That is about 50 ns an element on
the 2-core host, against ATen's vectorized kernels: in the transformer training step of benchmarks/models.py its
three dropout kernels took 110 ms of a 190 ms compiled step (eager npu's whole step: 107 ms). With
``fallback_random`` the graph calls ATen's ``rand_like``, ``bernoulli_``, ``rand``, ... as extern kernels: eager npu
ops on the stream, drawing from the npu device's generator (``torch.npu.manual_seed`` repeats them). Graphs without
npu tensors (CPU graphs) keep Inductor's default.

Dropout is the exception to fallback_random's rule of keeping the op whole: ``native_dropout`` as an extern op is
softnpu's eager composite (``bernoulli_`` of a bool mask, 6 ns an element, then a multiply by the bool mask, which
promotes it: 1.3 ms a call on average in that step). npu graphs decompose it as Inductor does without fallback_random,
``rand_like(x) > p`` and the scaling: ``rand_like`` is ATen's ``uniform_`` (3.5 ns an element) and the rest fuses
into Inductor's kernels. Measured in the transformer training step: the step's kernels 64 -> 54 ms. So a compiled
model's dropout masks are not eager npu's for the same seed (as with Inductor on CUDA); they are repeatable.
"""

import functools
import unittest.mock

import torch


def _on_npu(example_inputs) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == "npu" for x in example_inputs)


def npu_decomp_table() -> dict:
    """Inductor's table under fallback_random, with dropout decomposed as Inductor does without it. compile_fx
    takes it as its table function (a module-level function: the FX graph cache pickles it into the key, where a
    ``decompositions=`` dict would make the cache bypass the graph)."""
    from torch._inductor.decomposition import decompositions, extra_random_decomps

    dropout = torch.ops.aten.native_dropout.default
    return {**decompositions, dropout: extra_random_decomps[dropout]}


def apply() -> None:
    import torch._inductor.compile_fx as compile_fx_module

    compile_fx = compile_fx_module.compile_fx
    if getattr(compile_fx, "softnpu_fallback_random", False):
        return

    @functools.wraps(compile_fx)
    def compile_npu_randoms_with_aten(model, example_inputs, *args, **kwargs):
        if not _on_npu(example_inputs):
            return compile_fx(model, example_inputs, *args, **kwargs)
        with torch._inductor.config.patch(fallback_random=True), \
                unittest.mock.patch.object(compile_fx_module, "select_decomp_table", npu_decomp_table):
            return compile_fx(model, example_inputs, *args, **kwargs)

    compile_npu_randoms_with_aten.softnpu_fallback_random = True
    compile_fx_module.compile_fx = compile_npu_randoms_with_aten
