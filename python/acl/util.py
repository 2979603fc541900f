"""acl.util: host pointers and numpy arrays or bytes, as pyACL's acl.util. The pointers are host memory (a numpy
array's data, a bytes object's): the object must outlive every use of its pointer."""
import ctypes

import numpy as np


def numpy_to_ptr(array):
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("numpy_to_ptr needs a C-contiguous array (np.ascontiguousarray)")
    return array.ctypes.data


def ptr_to_numpy(ptr, shape, np_type):
    """A numpy array over host memory at ptr (no copy); np_type is a numpy type number (np.dtype(...).num), as pyACL's."""
    if not ptr:
        raise ValueError("ptr_to_numpy: the pointer is NULL")
    dtype = np.dtype(next(t for t in np.sctypeDict.values() if np.dtype(t).num == np_type))
    count = int(np.prod(shape)) if len(shape) else 1
    buf = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


def bytes_to_ptr(data):
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value


def ptr_to_bytes(ptr, size):
    return ctypes.string_at(ptr, size)
