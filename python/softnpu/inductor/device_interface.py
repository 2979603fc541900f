"""Dynamo's view of the npu device (torch._dynamo.device_interface.DeviceInterface), over torch.npu."""

import torch
from torch._dynamo.device_interface import DeviceInterface, caching_worker_current_devices, \
    caching_worker_device_properties

from .. import npu


def get_raw_stream(device_index: int) -> int:
    """The current stream of the device as the integer generated code passes around: its runtime handle (torch_npu's
    aclrtStream, torch.npu.Stream.npu_stream)."""
    return npu.current_stream(device_index).npu_stream


class NpuInterface(DeviceInterface):
    device = npu.device
    Event = npu.Event
    Stream = npu.Stream

    class Worker:
        """What compile workers, which must not initialize the device, ask: answered from values cached by the
        parent (Inductor fills them before it forks its workers)."""

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices["npu"] = device

        @staticmethod
        def current_device() -> int:
            if "npu" in caching_worker_current_devices:
                return caching_worker_current_devices["npu"]
            return npu.current_device()

        @staticmethod
        def get_device_properties(device=None):
            if device is not None:
                if isinstance(device, str):
                    device = torch.device(device)
                    assert device.type == "npu"
                if isinstance(device, torch.device):
                    device = device.index
            if device is None:
                device = NpuInterface.Worker.current_device()
            if "npu" not in caching_worker_device_properties:
                caching_worker_device_properties["npu"] = [
                    npu.get_device_properties(i) for i in range(npu.device_count())]
            return caching_worker_device_properties["npu"][device]

    current_device = staticmethod(npu.current_device)
    set_device = staticmethod(npu.set_device)
    device_count = staticmethod(npu.device_count)
    stream = staticmethod(npu.stream)
    current_stream = staticmethod(npu.current_stream)
    set_stream = staticmethod(npu.set_stream)
    synchronize = staticmethod(npu.synchronize)
    get_device_properties = staticmethod(npu.get_device_properties)
    memory_allocated = staticmethod(npu.memory_allocated)
    get_raw_stream = staticmethod(get_raw_stream)

    @staticmethod
    def is_available() -> bool:
        return npu.is_available()

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = npu.current_device()
        if device != previous:
            npu.set_device(device)
        return previous

    exchange_device = maybe_exchange_device

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        npu.set_stream(npu.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def get_compute_capability(device=None) -> str:
        # As torch_npu's: an NPU has no CUDA capability; the chip's name tells Inductor's caches one device from another.
        return npu.get_device_name(device)

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False  # npu kernels are Inductor's C++ kernels

    @staticmethod
    def raise_if_triton_unavailable(device=None) -> None:
        raise RuntimeError("softnpu compiles npu kernels with Inductor's C++ backend, not Triton")

