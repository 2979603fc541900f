"""Offline models from Python: conversion in memory (atc's, without files), and the ONNX backend over ACL.

`convert(onnx_bytes)` is what `atc --framework=5 --soc_version=<this device>` does, returning the .om image; it raises
`ConversionError` carrying ATC's error code and every unsupported node. Running a converted model goes through ACL
(the `acl` module, or `ais_bench`), as on Ascend.
"""
from __future__ import annotations

import ctypes
import functools
import pathlib

__all__ = ["ConversionError", "convert", "library"]


class ConversionError(RuntimeError):
    """atc refused the model: `code` is ATC's error code (E19010, EZ3003, E10001, ...)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.code = text.split(":", 1)[0]


@functools.cache
def library() -> ctypes.CDLL:
    """libsoftnpu_offline.so, the model library atc and ACL are built on."""
    lib = ctypes.CDLL(str(pathlib.Path(__file__).resolve().parent.parent / "lib" / "libsoftnpu_offline.so"))
    lib.softnpuOfflineConvert.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                          ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                                          ctypes.POINTER(ctypes.c_void_p)]
    lib.softnpuOfflineConvert.restype = ctypes.c_int
    lib.softnpuOfflineFree.argtypes = [ctypes.c_void_p]
    return lib


def convert(onnx_model: bytes, precision_mode: str | None = None) -> bytes:
    """Converts a serialized ONNX model to an offline model (.om bytes), as atc does."""
    lib = library()
    om, size, error = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_void_p()
    mode = precision_mode.encode() if precision_mode else None
    if lib.softnpuOfflineConvert(onnx_model, len(onnx_model), mode, ctypes.byref(om), ctypes.byref(size),
                                 ctypes.byref(error)) != 0:
        text = ctypes.string_at(error).decode()
        lib.softnpuOfflineFree(error)
        raise ConversionError(text)
    try:
        return ctypes.string_at(om, size.value)
    finally:
        lib.softnpuOfflineFree(om)
