"""libascendcl.so (csrc/offline/acl) through ctypes: the library, found in softnpu's CANN toolkit tree without importing
softnpu (nor torch), and the C signatures pyACL's functions call."""
import ctypes
import importlib.util
import os

c_ptr = ctypes.c_void_p
c_size = ctypes.c_size_t
c_int = ctypes.c_int
c_i32 = ctypes.c_int32
c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64

ACL_MAX_DIM_CNT = 128
ACL_MAX_TENSOR_NAME_LEN = 128
ACL_MAX_BATCH_NUM = 128


class IODims(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * ACL_MAX_TENSOR_NAME_LEN), ("dimCount", c_size),
                ("dims", ctypes.c_int64 * ACL_MAX_DIM_CNT)]

    def to_dict(self):
        return {"name": self.name.decode(), "dimCount": self.dimCount, "dims": list(self.dims[:self.dimCount])}

    @classmethod
    def from_dict(cls, d):
        dims = list(d["dims"])
        if len(dims) > ACL_MAX_DIM_CNT:
            raise ValueError(f"at most {ACL_MAX_DIM_CNT} dims, got {len(dims)}")
        out = cls()
        out.name = d.get("name", "").encode()[:ACL_MAX_TENSOR_NAME_LEN - 1]
        out.dimCount = d.get("dimCount", len(dims))
        for i, v in enumerate(dims):
            out.dims[i] = v
        return out


class Batch(ctypes.Structure):
    _fields_ = [("batchCount", c_size), ("batch", ctypes.c_uint64 * ACL_MAX_BATCH_NUM)]


def _library_path():
    spec = importlib.util.find_spec("softnpu")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("acl needs softnpu installed (libascendcl.so is one of its libraries)")
    # In softnpu's CANN toolkit tree, where CANN keeps it (csrc/ascend).
    return os.path.join(list(spec.submodule_search_locations)[0], "ascend-toolkit", "latest", "lib64",
                        "libascendcl.so")


lib = ctypes.CDLL(_library_path())

# name: (restype, argtypes)
_SIGNATURES = {
    "aclInit": (c_int, [ctypes.c_char_p]),
    "aclFinalize": (c_int, []),
    "aclGetRecentErrMsg": (ctypes.c_char_p, []),
    "aclCreateDataBuffer": (c_ptr, [c_ptr, c_size]),
    "aclDestroyDataBuffer": (c_int, [c_ptr]),
    "aclUpdateDataBuffer": (c_int, [c_ptr, c_ptr, c_size]),
    "aclGetDataBufferAddr": (c_ptr, [c_ptr]),
    "aclGetDataBufferSize": (c_u32, [c_ptr]),
    "aclGetDataBufferSizeV2": (c_size, [c_ptr]),
    "aclDataTypeSize": (c_size, [c_int]),
    "aclrtGetSocName": (ctypes.c_char_p, []),
    "aclrtGetRunMode": (c_int, [ctypes.POINTER(c_int)]),
    "aclrtSetDevice": (c_int, [c_i32]),
    "aclrtResetDevice": (c_int, [c_i32]),
    "aclrtGetDevice": (c_int, [ctypes.POINTER(c_i32)]),
    "aclrtGetDeviceCount": (c_int, [ctypes.POINTER(c_u32)]),
    "aclrtSynchronizeDevice": (c_int, []),
    "aclrtCreateContext": (c_int, [ctypes.POINTER(c_ptr), c_i32]),
    "aclrtDestroyContext": (c_int, [c_ptr]),
    "aclrtSetCurrentContext": (c_int, [c_ptr]),
    "aclrtGetCurrentContext": (c_int, [ctypes.POINTER(c_ptr)]),
    "aclrtCreateStream": (c_int, [ctypes.POINTER(c_ptr)]),
    "aclrtDestroyStream": (c_int, [c_ptr]),
    "aclrtSynchronizeStream": (c_int, [c_ptr]),
    "aclrtStreamQuery": (c_int, [c_ptr, ctypes.POINTER(c_int)]),
    "aclrtCreateEvent": (c_int, [ctypes.POINTER(c_ptr)]),
    "aclrtDestroyEvent": (c_int, [c_ptr]),
    "aclrtRecordEvent": (c_int, [c_ptr, c_ptr]),
    "aclrtStreamWaitEvent": (c_int, [c_ptr, c_ptr]),
    "aclrtSynchronizeEvent": (c_int, [c_ptr]),
    "aclrtEventElapsedTime": (c_int, [ctypes.POINTER(ctypes.c_float), c_ptr, c_ptr]),
    "aclrtEventGetTimestamp": (c_int, [c_ptr, ctypes.POINTER(ctypes.c_uint64)]),
    "aclrtMalloc": (c_int, [ctypes.POINTER(c_ptr), c_size, c_int]),
    "aclrtFree": (c_int, [c_ptr]),
    "aclrtMallocHost": (c_int, [ctypes.POINTER(c_ptr), c_size]),
    "aclrtFreeHost": (c_int, [c_ptr]),
    "aclrtMemcpy": (c_int, [c_ptr, c_size, c_ptr, c_size, c_int]),
    "aclrtMemcpyAsync": (c_int, [c_ptr, c_size, c_ptr, c_size, c_int, c_ptr]),
    "aclrtMemset": (c_int, [c_ptr, c_size, c_i32, c_size]),
    "aclrtMemsetAsync": (c_int, [c_ptr, c_size, c_i32, c_size, c_ptr]),
    "aclrtGetMemInfo": (c_int, [c_int, ctypes.POINTER(c_size), ctypes.POINTER(c_size)]),
    "aclmdlLoadFromFile": (c_int, [ctypes.c_char_p, ctypes.POINTER(c_u32)]),
    "aclmdlLoadFromMem": (c_int, [c_ptr, c_size, ctypes.POINTER(c_u32)]),
    "aclmdlUnload": (c_int, [c_u32]),
    "aclmdlCreateDesc": (c_ptr, []),
    "aclmdlDestroyDesc": (c_int, [c_ptr]),
    "aclmdlGetDesc": (c_int, [c_ptr, c_u32]),
    "aclmdlGetNumInputs": (c_size, [c_ptr]),
    "aclmdlGetNumOutputs": (c_size, [c_ptr]),
    "aclmdlGetInputSizeByIndex": (c_size, [c_ptr, c_size]),
    "aclmdlGetOutputSizeByIndex": (c_size, [c_ptr, c_size]),
    "aclmdlGetInputDims": (c_int, [c_ptr, c_size, ctypes.POINTER(IODims)]),
    "aclmdlGetOutputDims": (c_int, [c_ptr, c_size, ctypes.POINTER(IODims)]),
    "aclmdlGetCurOutputDims": (c_int, [c_ptr, c_size, ctypes.POINTER(IODims)]),
    "aclmdlGetInputNameByIndex": (ctypes.c_char_p, [c_ptr, c_size]),
    "aclmdlGetOutputNameByIndex": (ctypes.c_char_p, [c_ptr, c_size]),
    "aclmdlGetInputFormat": (c_int, [c_ptr, c_size]),
    "aclmdlGetOutputFormat": (c_int, [c_ptr, c_size]),
    "aclmdlGetInputDataType": (c_int, [c_ptr, c_size]),
    "aclmdlGetOutputDataType": (c_int, [c_ptr, c_size]),
    "aclmdlGetInputIndexByName": (c_int, [c_ptr, ctypes.c_char_p, ctypes.POINTER(c_size)]),
    "aclmdlGetOutputIndexByName": (c_int, [c_ptr, ctypes.c_char_p, ctypes.POINTER(c_size)]),
    "aclmdlGetDynamicBatch": (c_int, [c_ptr, ctypes.POINTER(Batch)]),
    "aclmdlGetInputDynamicGearCount": (c_int, [c_ptr, c_size, ctypes.POINTER(c_size)]),
    "aclmdlGetInputDynamicDims": (c_int, [c_ptr, c_size, ctypes.POINTER(IODims), c_size]),
    "aclmdlCreateDataset": (c_ptr, []),
    "aclmdlDestroyDataset": (c_int, [c_ptr]),
    "aclmdlAddDatasetBuffer": (c_int, [c_ptr, c_ptr]),
    "aclmdlGetDatasetNumBuffers": (c_size, [c_ptr]),
    "aclmdlGetDatasetBuffer": (c_ptr, [c_ptr, c_size]),
    "aclmdlSetDynamicBatchSize": (c_int, [c_u32, c_ptr, c_size, c_u64]),
    "aclmdlSetInputDynamicDims": (c_int, [c_u32, c_ptr, c_size, ctypes.POINTER(IODims)]),
    "aclmdlExecute": (c_int, [c_u32, c_ptr, c_ptr]),
    "aclmdlExecuteAsync": (c_int, [c_u32, c_ptr, c_ptr, c_ptr]),
}

for _name, (_res, _args) in _SIGNATURES.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def handle(p):
    """A pointer result as pyACL gives it: an int, 0 for NULL."""
    return p or 0
