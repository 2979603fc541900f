"""acl.rt: devices, contexts, streams, events and memory (acl_rt.h), as pyACL's acl.rt."""
import ctypes

from acl._lib import c_i32, c_ptr, c_size, c_u32, handle, lib


def _out(fn, ctype, *args):
    v = ctype()
    ret = fn(ctypes.byref(v), *args)
    return v.value, ret


def get_run_mode():
    return _out(lib.aclrtGetRunMode, ctypes.c_int)


def set_device(device_id):
    return lib.aclrtSetDevice(device_id)


def reset_device(device_id):
    return lib.aclrtResetDevice(device_id)


def get_device():
    return _out(lib.aclrtGetDevice, c_i32)


def get_device_count():
    return _out(lib.aclrtGetDeviceCount, c_u32)


def synchronize_device():
    return lib.aclrtSynchronizeDevice()


def create_context(device_id):
    ctx, ret = _out(lib.aclrtCreateContext, c_ptr, device_id)
    return handle(ctx), ret


def destroy_context(context):
    return lib.aclrtDestroyContext(context)


def set_context(context):
    return lib.aclrtSetCurrentContext(context)


def get_context():
    ctx, ret = _out(lib.aclrtGetCurrentContext, c_ptr)
    return handle(ctx), ret


def create_stream():
    s, ret = _out(lib.aclrtCreateStream, c_ptr)
    return handle(s), ret


def destroy_stream(stream):
    return lib.aclrtDestroyStream(stream)


def synchronize_stream(stream):
    return lib.aclrtSynchronizeStream(stream)


def stream_query(stream):
    """(status, ret): status 0 (ACL_STREAM_STATUS_COMPLETE) or 1 (ACL_STREAM_STATUS_NOT_READY)."""
    status = ctypes.c_int()
    ret = lib.aclrtStreamQuery(stream, ctypes.byref(status))
    return status.value, ret


def create_event():
    e, ret = _out(lib.aclrtCreateEvent, c_ptr)
    return handle(e), ret


def destroy_event(event):
    return lib.aclrtDestroyEvent(event)


def record_event(event, stream):
    return lib.aclrtRecordEvent(event, stream)


def stream_wait_event(stream, event):
    return lib.aclrtStreamWaitEvent(stream, event)


def synchronize_event(event):
    return lib.aclrtSynchronizeEvent(event)


def event_elapsed_time(start, end):
    return _out(lib.aclrtEventElapsedTime, ctypes.c_float, start, end)


def event_get_timestamp(event):
    """(microseconds since the host started when the event's work completed, ret)."""
    v = ctypes.c_uint64()
    ret = lib.aclrtEventGetTimestamp(event, ctypes.byref(v))
    return v.value, ret


def malloc(size, policy):
    p, ret = _out(lib.aclrtMalloc, c_ptr, size, policy)
    return handle(p), ret


def free(dev_ptr):
    return lib.aclrtFree(dev_ptr)


def malloc_host(size):
    p, ret = _out(lib.aclrtMallocHost, c_ptr, size)
    return handle(p), ret


def free_host(host_ptr):
    return lib.aclrtFreeHost(host_ptr)


def memcpy(dst, dest_max, src, count, kind):
    return lib.aclrtMemcpy(dst, dest_max, src, count, kind)


def memcpy_async(dst, dest_max, src, count, kind, stream):
    return lib.aclrtMemcpyAsync(dst, dest_max, src, count, kind, stream)


def memset(dev_ptr, max_count, value, count):
    return lib.aclrtMemset(dev_ptr, max_count, value, count)


def memset_async(dev_ptr, max_count, value, count, stream):
    return lib.aclrtMemsetAsync(dev_ptr, max_count, value, count, stream)


def get_mem_info(attr):
    free_, total = c_size(), c_size()
    ret = lib.aclrtGetMemInfo(attr, ctypes.byref(free_), ctypes.byref(total))
    return free_.value, total.value, ret
