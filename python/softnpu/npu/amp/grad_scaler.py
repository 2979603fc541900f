import torch


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler("npu", ...)."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        super().__init__("npu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
