import functools

import torch


class autocast(torch.amp.autocast):
    """torch.autocast("npu", ...): float16 by default, as on Ascend."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
        super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="npu")
custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="npu")
