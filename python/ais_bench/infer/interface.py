"""ais_bench's InferSession over pyACL: load an offline model on a device, feed numpy arrays, get numpy arrays back.

    from ais_bench.infer.interface import InferSession
    session = InferSession(0, "model.om")
    outputs = session.infer([x])                     # mode="dymbatch" / "dymdims" for dynamic models
    session.free_resource()
"""
import ctypes
import enum
import time

import numpy as np

import acl

ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_ERROR_REPEAT_INITIALIZE = 100002
DYNAMIC_TENSOR_NAME = "ascend_mbatch_shape_data"


class dtype(enum.Enum):  # noqa: N801 - ais_bench's name: its tensors print as dtype.float32
    float32 = 0
    float16 = 1
    int8 = 2
    int32 = 3
    uint8 = 4
    int16 = 6
    uint16 = 7
    uint32 = 8
    int64 = 9
    uint64 = 10
    double = 11
    bool = 12
    bfloat16 = 27


_NUMPY = {0: np.float32, 1: np.float16, 2: np.int8, 3: np.int32, 4: np.uint8, 6: np.int16, 7: np.uint16,
          8: np.uint32, 9: np.int64, 10: np.uint64, 11: np.float64, 12: np.bool_}


class TensorDesc:
    """One input or output of the model: name, shape (-1 for a dynamic dim), datatype, format, size in bytes."""

    def __init__(self, name, shape, datatype, format, size):
        self.name, self.shape, self.datatype, self.format, self.size = name, shape, datatype, format, size
        self.realsize = size

    def __repr__(self):
        return f"TensorDesc(name={self.name!r}, shape={self.shape}, datatype={self.datatype}, size={self.size})"


class Summary:
    def __init__(self):
        self.exec_time_list = []  # (start, end) pairs of each run's compute, in ms of the device's clock
        self.h2d_time_list = []   # ms the host spent on each run's inputs (staged for the device, copied on the stream)
        self.d2h_time_list = []   # ms the host spent on each run's outputs after the run


def _check(ret, what):
    if ret != 0:
        raise RuntimeError(f"{what} failed with ACL error {ret}: {acl.get_recent_err_msg()}")


class InferSession:
    def __init__(self, device_id, model_path, acl_json_path=None, debug=False, loop=1):
        self.device_id = device_id
        self.model_path = model_path
        self.loop = loop
        self._summary = Summary()
        ret = acl.init(acl_json_path)
        if ret not in (0, ACL_ERROR_REPEAT_INITIALIZE):
            _check(ret, "acl.init")
        # The thread's context before the session's own, made current again by free_resource.
        previous, ret = acl.rt.get_context()
        self._previous_context = previous if ret == 0 else 0
        _check(acl.rt.set_device(device_id), f"acl.rt.set_device({device_id})")
        self.context, ret = acl.rt.create_context(device_id)
        _check(ret, "acl.rt.create_context")
        self.stream, ret = acl.rt.create_stream()
        _check(ret, "acl.rt.create_stream")
        self.model_id, ret = acl.mdl.load_from_file(model_path)
        _check(ret, f"acl.mdl.load_from_file({model_path!r})")
        self.desc = acl.mdl.create_desc()
        _check(acl.mdl.get_desc(self.desc, self.model_id), "acl.mdl.get_desc")
        self._inputs = [self._tensor(i, True) for i in range(acl.mdl.get_num_inputs(self.desc))]
        self._outputs = [self._tensor(i, False) for i in range(acl.mdl.get_num_outputs(self.desc))]
        self._start, ret = acl.rt.create_event()
        _check(ret, "acl.rt.create_event")
        self._end, ret = acl.rt.create_event()
        _check(ret, "acl.rt.create_event")
        self._in_dataset, self._in_ptrs = self._dataset(self._inputs)
        self._out_dataset, self._out_ptrs = self._dataset(self._outputs)
        # Pinned host buffers for the outputs of static shape: copied back on the stream behind the run, so that a
        # run waits for the device once (the copies and the run), not once per copy.
        self._host = []
        for t in self._outputs:
            ptr = 0
            if t.size and all(d >= 0 for d in t.shape):
                ptr, ret = acl.rt.malloc_host(t.size)
                _check(ret, f"acl.rt.malloc_host({t.size}) for {t.name}")
            self._host.append(ptr)
        self._freed = False

    def _tensor(self, i, is_input):
        m = acl.mdl
        get_dims, name, dt, fmt, size = (
            (m.get_input_dims, m.get_input_name_by_index, m.get_input_data_type, m.get_input_format,
             m.get_input_size_by_index) if is_input else
            (m.get_output_dims, m.get_output_name_by_index, m.get_output_data_type, m.get_output_format,
             m.get_output_size_by_index))
        dims, ret = get_dims(self.desc, i)
        _check(ret, "acl.mdl.get_input_dims" if is_input else "acl.mdl.get_output_dims")
        return TensorDesc(name(self.desc, i), dims["dims"], dtype(dt(self.desc, i)), fmt(self.desc, i),
                          size(self.desc, i))

    def _dataset(self, tensors):
        dataset = acl.mdl.create_dataset()
        ptrs = []
        for t in tensors:
            ptr = 0
            if t.size:
                ptr, ret = acl.rt.malloc(t.size, ACL_MEM_MALLOC_HUGE_FIRST)
                _check(ret, f"acl.rt.malloc({t.size}) for {t.name}")
            ptrs.append(ptr)
            _, ret = acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(ptr, t.size))
            _check(ret, "acl.mdl.add_dataset_buffer")
        return dataset, ptrs

    def get_inputs(self):
        return [t for t in self._inputs if t.name != DYNAMIC_TENSOR_NAME]

    def get_outputs(self):
        return list(self._outputs)

    def summary(self):
        return self._summary

    def _dynamic_index(self):
        for i, t in enumerate(self._inputs):
            if t.name == DYNAMIC_TENSOR_NAME:
                return i
        return None

    def infer(self, feeds, mode="static", custom_sizes=100000, out_array=True):
        """Runs the model on feeds (one numpy array per input, in order); returns the outputs as numpy arrays.
        mode: "static", "dymbatch" (the batch is the feeds' first dim) or "dymdims" (the feeds' shapes)."""
        if self._freed:
            raise RuntimeError("InferSession.infer: free_resource() was called")
        inputs = self.get_inputs()
        if len(feeds) != len(inputs):
            raise ValueError(f"the model takes {len(inputs)} inputs, got {len(feeds)} feeds")
        feeds = [np.ascontiguousarray(f) for f in feeds]
        for f, t in zip(feeds, inputs):
            want = _NUMPY[t.datatype.value]
            if f.dtype != want:
                raise ValueError(f"input {t.name} is {np.dtype(want).name}, the feed is {f.dtype.name}")
            if f.nbytes > t.size:
                raise ValueError(f"input {t.name} takes at most {t.size} bytes, the feed has {f.nbytes}")
        dyn = self._dynamic_index()
        if mode == "dymbatch":
            _check(acl.mdl.set_dynamic_batch_size(self.model_id, self._in_dataset, dyn if dyn is not None else -1,
                                                  feeds[0].shape[0]), "acl.mdl.set_dynamic_batch_size")
        elif mode == "dymdims":
            dims = [d for f in feeds for d in f.shape]
            _check(acl.mdl.set_input_dynamic_dims(self.model_id, self._in_dataset, dyn if dyn is not None else -1,
                                                  {"name": "", "dimCount": len(dims), "dims": dims}),
                   "acl.mdl.set_input_dynamic_dims")
        elif mode != "static":
            raise ValueError(f"mode {mode!r}: softnpu's ais_bench runs 'static', 'dymbatch' and 'dymdims'")
        start = time.perf_counter()
        for i, f in enumerate(feeds):
            # Staged from the feed at the call (runtime/copy.cpp): the feed may go once this returns.
            _check(acl.rt.memcpy_async(self._in_ptrs[i], inputs[i].size, acl.util.numpy_to_ptr(f), f.nbytes,
                                       ACL_MEMCPY_HOST_TO_DEVICE, self.stream),
                   f"copying input {inputs[i].name} to the device")
        self._summary.h2d_time_list.append((time.perf_counter() - start) * 1000.0)
        allocated = []
        for i, t in enumerate(self._outputs):
            if not t.size:  # the run allocates an output whose shape depends on the data
                buf = acl.mdl.get_dataset_buffer(self._out_dataset, i)
                acl.update_data_buffer(buf, 0, 0)
                allocated.append(buf)
        _check(acl.rt.record_event(self._start, self.stream), "acl.rt.record_event")
        _check(acl.mdl.execute_async(self.model_id, self._in_dataset, self._out_dataset, self.stream),
               "acl.mdl.execute_async")
        _check(acl.rt.record_event(self._end, self.stream), "acl.rt.record_event")
        for i, t in enumerate(self._outputs):
            if self._host[i]:
                _check(acl.rt.memcpy_async(self._host[i], t.size, self._out_ptrs[i], t.size,
                                           ACL_MEMCPY_DEVICE_TO_HOST, self.stream),
                       f"copying output {t.name} to the host")
        _check(acl.rt.synchronize_stream(self.stream), "running the model")
        ms, ret = acl.rt.event_elapsed_time(self._start, self._end)
        _check(ret, "acl.rt.event_elapsed_time")
        self._summary.exec_time_list.append((0.0, ms))
        outputs = []
        start = time.perf_counter()
        for i, t in enumerate(self._outputs):
            if self._host[i]:
                out = np.empty(t.shape, dtype=_NUMPY[t.datatype.value])
                ctypes.memmove(out.ctypes.data, self._host[i], out.nbytes)
                outputs.append(out)
                continue
            dims, ret = acl.mdl.get_cur_output_dims(self.desc, i)
            _check(ret, "acl.mdl.get_cur_output_dims")
            out = np.empty(dims["dims"], dtype=_NUMPY[t.datatype.value])
            buf = acl.mdl.get_dataset_buffer(self._out_dataset, i)
            src = acl.get_data_buffer_addr(buf)
            if out.nbytes:
                _check(acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.nbytes, src, out.nbytes,
                                     ACL_MEMCPY_DEVICE_TO_HOST), f"copying output {t.name} to the host")
            outputs.append(out)
        self._summary.d2h_time_list.append((time.perf_counter() - start) * 1000.0)
        for buf in allocated:
            if acl.get_data_buffer_addr(buf):
                acl.rt.free(acl.get_data_buffer_addr(buf))
            acl.update_data_buffer(buf, 0, 0)
        return outputs

    def free_resource(self):
        if self._freed:
            return
        self._freed = True
        for dataset, ptrs in ((self._in_dataset, self._in_ptrs), (self._out_dataset, self._out_ptrs)):
            for i in range(acl.mdl.get_dataset_num_buffers(dataset)):
                acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(dataset, i))
            acl.mdl.destroy_dataset(dataset)
            for p in ptrs:
                if p:
                    acl.rt.free(p)
        for p in self._host:
            if p:
                acl.rt.free_host(p)
        acl.rt.destroy_event(self._start)
        acl.rt.destroy_event(self._end)
        acl.mdl.destroy_desc(self.desc)
        acl.mdl.unload(self.model_id)
        acl.rt.destroy_stream(self.stream)
        acl.rt.destroy_context(self.context)
        if self._previous_context:
            acl.rt.set_context(self._previous_context)

    def __del__(self):
        if getattr(self, "_freed", True) is False:
            self.free_resource()
