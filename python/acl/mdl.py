"""acl.mdl: offline models (acl_mdl.h), as pyACL's acl.mdl. Dims are dicts {"name", "dimCount", "dims"}."""
import ctypes

from acl._lib import Batch, IODims, c_size, c_u32, handle, lib


def load_from_file(model_path):
    mid = c_u32()
    ret = lib.aclmdlLoadFromFile(model_path.encode(), ctypes.byref(mid))
    return mid.value, ret


def load_from_mem(model, model_size):
    """model: a pointer to the model's bytes (acl.util.bytes_to_ptr), or the bytes themselves."""
    mid = c_u32()
    if isinstance(model, (bytes, bytearray)):
        buf = ctypes.create_string_buffer(bytes(model), len(model))
        ret = lib.aclmdlLoadFromMem(ctypes.cast(buf, ctypes.c_void_p), model_size, ctypes.byref(mid))
    else:
        ret = lib.aclmdlLoadFromMem(model, model_size, ctypes.byref(mid))
    return mid.value, ret


def unload(model_id):
    return lib.aclmdlUnload(model_id)


def create_desc():
    return handle(lib.aclmdlCreateDesc())


def destroy_desc(model_desc):
    return lib.aclmdlDestroyDesc(model_desc)


def get_desc(model_desc, model_id):
    return lib.aclmdlGetDesc(model_desc, model_id)


def get_num_inputs(model_desc):
    return lib.aclmdlGetNumInputs(model_desc)


def get_num_outputs(model_desc):
    return lib.aclmdlGetNumOutputs(model_desc)


def get_input_size_by_index(model_desc, index):
    return lib.aclmdlGetInputSizeByIndex(model_desc, index)


def get_output_size_by_index(model_desc, index):
    return lib.aclmdlGetOutputSizeByIndex(model_desc, index)


def _dims(fn, model_desc, index):
    d = IODims()
    ret = fn(model_desc, index, ctypes.byref(d))
    return (d.to_dict() if ret == 0 else {}), ret


def get_input_dims(model_desc, index):
    return _dims(lib.aclmdlGetInputDims, model_desc, index)


def get_output_dims(model_desc, index):
    return _dims(lib.aclmdlGetOutputDims, model_desc, index)


def get_cur_output_dims(model_desc, index):
    return _dims(lib.aclmdlGetCurOutputDims, model_desc, index)


def _name(p):
    return p.decode() if p is not None else ""


def get_input_name_by_index(model_desc, index):
    return _name(lib.aclmdlGetInputNameByIndex(model_desc, index))


def get_output_name_by_index(model_desc, index):
    return _name(lib.aclmdlGetOutputNameByIndex(model_desc, index))


def get_input_format(model_desc, index):
    return lib.aclmdlGetInputFormat(model_desc, index)


def get_output_format(model_desc, index):
    return lib.aclmdlGetOutputFormat(model_desc, index)


def get_input_data_type(model_desc, index):
    return lib.aclmdlGetInputDataType(model_desc, index)


def get_output_data_type(model_desc, index):
    return lib.aclmdlGetOutputDataType(model_desc, index)


def _index(fn, model_desc, name):
    i = c_size()
    ret = fn(model_desc, name.encode(), ctypes.byref(i))
    return i.value, ret


def get_input_index_by_name(model_desc, name):
    return _index(lib.aclmdlGetInputIndexByName, model_desc, name)


def get_output_index_by_name(model_desc, name):
    return _index(lib.aclmdlGetOutputIndexByName, model_desc, name)


def get_dynamic_batch(model_desc):
    b = Batch()
    ret = lib.aclmdlGetDynamicBatch(model_desc, ctypes.byref(b))
    return {"batchCount": b.batchCount, "batch": list(b.batch[:b.batchCount])}, ret


def get_input_dynamic_gear_count(model_desc, index):
    n = c_size()
    ret = lib.aclmdlGetInputDynamicGearCount(model_desc, index, ctypes.byref(n))
    return n.value, ret


def get_input_dynamic_dims(model_desc, index, gear_count):
    gears = (IODims * max(gear_count, 1))()
    ret = lib.aclmdlGetInputDynamicDims(model_desc, index, gears, gear_count)
    return [g.to_dict() for g in gears[:gear_count]] if ret == 0 else [], ret


def create_dataset():
    return handle(lib.aclmdlCreateDataset())


def destroy_dataset(dataset):
    return lib.aclmdlDestroyDataset(dataset)


def add_dataset_buffer(dataset, data_buffer):
    return dataset, lib.aclmdlAddDatasetBuffer(dataset, data_buffer)


def get_dataset_num_buffers(dataset):
    return lib.aclmdlGetDatasetNumBuffers(dataset)


def get_dataset_buffer(dataset, index):
    return handle(lib.aclmdlGetDatasetBuffer(dataset, index))


def set_dynamic_batch_size(model_id, dataset, index, batch_size):
    return lib.aclmdlSetDynamicBatchSize(model_id, dataset, index, batch_size)


def set_input_dynamic_dims(model_id, dataset, index, dims):
    d = IODims.from_dict(dims)
    return lib.aclmdlSetInputDynamicDims(model_id, dataset, index, ctypes.byref(d))


def execute(model_id, input, output):
    return lib.aclmdlExecute(model_id, input, output)


def execute_async(model_id, input, output, stream):
    return lib.aclmdlExecuteAsync(model_id, input, output, stream)
