"""``torch_npu.optim``: torch_npu's fused optimizers, with torch_npu's constructor signatures.

Each updates all its parameters with ATen's fused step (``torch._fused_adamw_``, ``_fused_adam_``, ``_fused_sgd_``):
one op per step and parameter group, launched on the stream like any op, so the numerics are torch.optim's
``AdamW``/``Adam``/``SGD`` with ``fused=True`` (and their state dicts are torch.optim's). transformers' Trainer uses
``NpuFusedAdamW`` for ``optim="adamw_torch_npu_fused"``.
"""

import torch
from torch.optim.optimizer import required

__all__ = ["NpuFusedAdamW", "NpuFusedAdam", "NpuFusedSGD"]


class NpuFusedAdamW(torch.optim.AdamW):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, fused=True)


class NpuFusedAdam(torch.optim.Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, fused=True)


class NpuFusedSGD(torch.optim.SGD):
    def __init__(self, params, lr=required, momentum=0, dampening=0, weight_decay=0, nesterov=False):
        if lr is required:
            raise TypeError("NpuFusedSGD() missing required argument: 'lr'")
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                         nesterov=nesterov, fused=True)
