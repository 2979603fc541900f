"""The legacy tensor and storage types of torch.npu, as torch.cuda's: torch.npu.FloatTensor(2, 3) is an
uninitialized npu float32 tensor, torch.npu.FloatTensor([1, 2]) one with that data, and isinstance(t,
torch.npu.FloatTensor) holds for every npu float32 tensor; torch.npu.FloatStorage(n) is an npu TypedStorage."""

from typing import Any

import torch
from torch._utils import classproperty
from torch.storage import _LegacyStorage

from .device import _lazy_init, current_device

_DTYPES = {
    "Double": torch.float64,
    "Float": torch.float32,
    "Half": torch.float16,
    "BFloat16": torch.bfloat16,
    "Long": torch.int64,
    "Int": torch.int32,
    "Short": torch.int16,
    "Char": torch.int8,
    "Byte": torch.uint8,
    "Bool": torch.bool,
}


class _NpuTensorTypeMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return (isinstance(obj, torch.Tensor) and obj.device.type == "npu" and obj.dtype == cls.dtype
                and obj.layout == torch.strided)


class _NpuTensorType(metaclass=_NpuTensorTypeMeta):
    is_npu = True
    is_sparse = False
    dtype: torch.dtype

    def __new__(cls, *args: Any, device: Any = None) -> torch.Tensor:
        _lazy_init()
        dev = torch.device("npu", current_device()) if device is None else torch.device(device)
        if dev.type != "npu":
            raise RuntimeError(f"legacy constructor expects device type: npu but device type: {dev.type} was passed")
        if len(args) == 1 and not isinstance(args[0], int) and not isinstance(args[0], torch.Size):
            return torch.tensor(args[0], dtype=cls.dtype, device=dev)
        sizes = args[0] if len(args) == 1 and isinstance(args[0], torch.Size) else args
        if not all(isinstance(s, int) for s in sizes):
            raise TypeError(f"{cls.__name__}(): expected sizes (ints), a torch.Size or data, got {args!r}")
        return torch.empty(sizes if sizes else (0,), dtype=cls.dtype, device=dev)


class _NpuLegacyStorage(_LegacyStorage):
    @classmethod
    def from_buffer(cls, *args: Any, **kwargs: Any):
        raise RuntimeError("from_buffer: Not available for NPU storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args: Any, **kwargs: Any):
        raise RuntimeError("_new_with_weak_ptr: Not available for NPU storage")

    @classmethod
    def _new_shared_filename(cls, manager: Any, obj: Any, size: int, *, device: Any = None, dtype: Any = None):
        raise RuntimeError("_new_shared_filename: Not available for NPU storage")


def _storage_type(name: str, dtype: torch.dtype) -> type:
    # TypedStorage reads the dtype from these class properties, and the device from the class's module's last part.
    return type(_NpuLegacyStorage)(name, (_NpuLegacyStorage,), {
        "dtype": classproperty(lambda cls: dtype),
        "_dtype": classproperty(lambda cls: dtype),
        "__module__": "torch.npu",
    })


def _make_types() -> dict[str, type]:
    made: dict[str, type] = {}
    for prefix, dtype in _DTYPES.items():
        made[f"{prefix}Tensor"] = _NpuTensorTypeMeta(f"{prefix}Tensor", (_NpuTensorType,),
                                                     {"dtype": dtype, "__module__": "torch.npu"})
        made[f"{prefix}Storage"] = _storage_type(f"{prefix}Storage", dtype)
    return made


globals().update(_make_types())
__all__ = [f"{p}{kind}" for p in _DTYPES for kind in ("Tensor", "Storage")]
