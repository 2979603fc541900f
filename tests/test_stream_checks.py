"""torch.npu.Stream as torch_npu checks it: a stream rebuilt from (stream_id, device_index, device_type) must exist,
or construction fails at once (not at the first launch); Stream(is_sync_launch=True) is a stream like the others."""

import pytest
import torch
import torch_npu  # noqa: F401


def _npu_type() -> int:
    return torch.npu.current_stream().device_type


@pytest.mark.parametrize("stream_id,device_index,device_type", [
    (99999, 0, None),  # no such stream
    (-1, 0, None),
    (0, 999, None),  # no such device
    (0, -1, None),
    (0, 0, 999),  # not npu
])
def test_a_stream_that_does_not_exist_fails_at_construction(stream_id, device_index, device_type):
    with pytest.raises(RuntimeError):
        torch.npu.Stream(stream_id=stream_id, device_index=device_index,
                         device_type=_npu_type() if device_type is None else device_type)


def test_existing_streams_are_rebuilt_and_sync_launch_streams_work():
    for s1 in (torch.npu.default_stream(), torch.npu.Stream(), torch.npu.Stream(is_sync_launch=True),
               torch.npu.Stream(device=1, priority=-1)):
        s2 = torch.npu.Stream(stream_id=s1.stream_id, device_index=s1.device_index, device_type=s1.device_type)
        assert s2 == s1
        with torch.npu.stream(s2):
            x = torch.ones(8, device=s2.device) * 3
        s2.synchronize()
        assert x.sum().item() == 24
