import torch


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler("npu", ...), with torch_npu's overflow rule: an inf/NaN found in the gradients of any
    optimizer this iteration skips the steps of every optimizer until update() (torch's skips only the optimizers
    whose own gradients overflowed). torch_npu keeps one overflow flag per scaler, as the chip's float status
    register (which flags any overflow on the device) made it; models trained with several optimizers rely on them
    skipping together."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        super().__init__("npu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        # Every optimizer unscaled since the last update(), this one included.
        found = (v.item() for state in self._per_optimizer_states.values()
                 for v in state.get("found_inf_per_device", {}).values())
        if any(found):
            print("Gradient overflow. Skipping step")
            return None
        return optimizer.step(*args, **kwargs)
