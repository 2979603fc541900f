"""torch_npu._C._cd: ``DType``, torch_npu's numbers for the data types of ACL that torch has no dtype for (and the
others): ACL's aclDataType plus 256, which torch_npu's ops take where they take a dtype (``weight_dtype=
torch_npu.hifloat8``). torch_npu also exports each as ``torch_npu.<name>``."""

_ACL_OFFSET = 256

# aclDataType (CANN's acl_base.h).
_ACL_DATA_TYPES = {
    "float32": 0, "float16": 1, "int8": 2, "int32": 3, "uint8": 4, "int16": 6, "uint16": 7, "uint32": 8, "int64": 9,
    "uint64": 10, "float64": 11, "bool": 12, "string": 13, "complex64": 16, "complex128": 17, "bfloat16": 27,
    "int4": 29, "uint1": 30, "complex32": 33, "hifloat8": 34, "float8_e5m2": 35, "float8_e4m3fn": 36,
    "float8_e8m0fnu": 37, "float6_e3m2": 38, "float6_e2m3": 39, "float4_e2m1fn_x2": 40, "float4_e1m2fn_x2": 41,
}


class DType:
    """torch_npu._C._cd.DType: one int per data type (DType.hifloat8 == 290)."""


for _name, _value in _ACL_DATA_TYPES.items():
    setattr(DType, _name, _ACL_OFFSET + _value)
del _name, _value
