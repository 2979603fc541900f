"""Random numbers in npu graphs come from ATen's random kernels (Inductor's ``config.fallback_random``).

By default Inductor replaces ``rand``, ``bernoulli`` and dropout with its own generator: in C++ kernels, a Philox
engine built for every element, one element at a time (``normalized_rand_cpu``). That is about 50 ns an element on
the 2-core host, against ATen's vectorized kernels: in the transformer training step of benchmarks/models.py its
three dropout kernels took 110 ms of a 190 ms compiled step (eager npu's whole step: 107 ms). With
``fallback_random`` the graph calls ATen's ``native_dropout``, ``bernoulli_``, ``rand``, ... as extern kernels: eager
npu ops on the stream, drawing from the npu device's generator, so a compiled model's random numbers are eager npu's
for the same seed. Graphs without npu tensors (CPU graphs) keep Inductor's default.
"""

import functools

import torch


def _on_npu(example_inputs) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == "npu" for x in example_inputs)


def apply() -> None:
    import torch._inductor.compile_fx as compile_fx_module

    compile_fx = compile_fx_module.compile_fx
    if getattr(compile_fx, "softnpu_fallback_random", False):
        return

    @functools.wraps(compile_fx)
    def compile_npu_randoms_with_aten(model, example_inputs, *args, **kwargs):
        if not _on_npu(example_inputs):
            return compile_fx(model, example_inputs, *args, **kwargs)
        with torch._inductor.config.patch(fallback_random=True):
            return compile_fx(model, example_inputs, *args, **kwargs)

    compile_npu_randoms_with_aten.softnpu_fallback_random = True
    compile_fx_module.compile_fx = compile_npu_randoms_with_aten
