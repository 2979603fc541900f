"""pyACL: the `acl` Python module of CANN, over softnpu's libascendcl.so (csrc/offline/acl).

As pyACL, every call returns its ACL error number (`ret`, 0 on success), after its values when it has some:
`model_id, ret = acl.mdl.load_from_file(path)`. Handles and pointers are ints. Nothing imports torch."""

from acl import mdl, rt, util
from acl._lib import handle, lib


def init(config_path=None):
    return lib.aclInit(config_path.encode() if config_path else None)


def finalize():
    return lib.aclFinalize()


def get_soc_name():
    name = lib.aclrtGetSocName()
    return name.decode() if name is not None else None


def get_recent_err_msg():
    msg = lib.aclGetRecentErrMsg()
    return msg.decode() if msg is not None else None


def create_data_buffer(data, size):
    return handle(lib.aclCreateDataBuffer(data, size))


def destroy_data_buffer(data_buffer):
    return lib.aclDestroyDataBuffer(data_buffer)


def update_data_buffer(data_buffer, data, size):
    return lib.aclUpdateDataBuffer(data_buffer, data, size)


def get_data_buffer_addr(data_buffer):
    return handle(lib.aclGetDataBufferAddr(data_buffer))


def get_data_buffer_size(data_buffer):
    return lib.aclGetDataBufferSize(data_buffer)


def get_data_buffer_size_v2(data_buffer):
    return lib.aclGetDataBufferSizeV2(data_buffer)


def data_type_size(data_type):
    return lib.aclDataTypeSize(data_type)


__all__ = ["init", "finalize", "get_soc_name", "get_recent_err_msg", "create_data_buffer", "destroy_data_buffer",
           "update_data_buffer", "get_data_buffer_addr", "get_data_buffer_size", "get_data_buffer_size_v2",
           "data_type_size", "rt", "mdl", "util"]
