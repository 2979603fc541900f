"""An ONNX backend (onnx.backend.base) that converts through atc in memory and runs through ACL (pyACL).

This is what ONNX's own backend tests (`onnx.backend.test.BackendTest`) drive: `prepare` converts the model with
`softnpu.offline.convert` (atc's conversion, every check included) and loads the .om with
`acl.mdl.load_from_mem`; `run` copies the inputs to npu device memory, executes the model with `acl.mdl.execute`
on the device's stream and copies the outputs back. Nothing here computes: every value comes from the model's
kernels on the npu.

BackendTest knows two device names, CPU and CUDA; the backend answers for "CPU", and that name is only BackendTest's
label for the test cases: the model runs on npu:0.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

import acl

from . import convert

# ACL's aclDataType numbers and numpy's types.
_ACL_TO_NUMPY = {0: np.float32, 1: np.float16, 2: np.int8, 3: np.int32, 4: np.uint8, 6: np.int16, 7: np.uint16,
                 8: np.uint32, 9: np.int64, 10: np.uint64, 11: np.float64, 12: np.bool_, 16: np.complex64,
                 17: np.complex128, 27: ml_dtypes.bfloat16, 35: ml_dtypes.float8_e5m2, 36: ml_dtypes.float8_e4m3fn,
                 37: ml_dtypes.float8_e8m0fnu}
_MEMCPY_HOST_TO_DEVICE = 1
_MEMCPY_DEVICE_TO_HOST = 2
_DEVICE = 0


def _check(ret: int, what: str) -> None:
    if ret != 0:
        raise RuntimeError(f"{what} failed with ACL error {ret}: {acl.get_recent_err_msg()}")


class _Session:
    """ACL initialized once per process, on npu:0."""

    ready = False

    @classmethod
    def ensure(cls) -> None:
        if cls.ready:
            return
        ret = acl.init()
        if ret not in (0, 100002):  # ACL_ERROR_REPEAT_INITIALIZE: someone else initialized it
            _check(ret, "acl.init")
        _check(acl.rt.set_device(_DEVICE), "acl.rt.set_device")
        cls.ready = True


class SoftnpuRep(BackendRep):
    def __init__(self, om: bytes):
        self.output_types = []
        _Session.ensure()
        self._om = np.frombuffer(om, dtype=np.uint8).copy()  # ACL reads the image during load only
        self.model_id, ret = acl.mdl.load_from_mem(acl.util.numpy_to_ptr(self._om), self._om.nbytes)
        _check(ret, "acl.mdl.load_from_mem")
        self.desc = acl.mdl.create_desc()
        _check(acl.mdl.get_desc(self.desc, self.model_id), "acl.mdl.get_desc")

    def __del__(self):
        if getattr(self, "desc", None) is not None:
            acl.mdl.destroy_desc(self.desc)
            acl.mdl.unload(self.model_id)

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            inputs = [inputs[acl.mdl.get_input_name_by_index(self.desc, i)]
                      for i in range(acl.mdl.get_num_inputs(self.desc))]
        n_out = acl.mdl.get_num_outputs(self.desc)
        in_ds, out_ds = acl.mdl.create_dataset(), acl.mdl.create_dataset()
        owned = []  # device buffers to free
        buffers = []
        try:
            for arr in inputs:
                host = np.ascontiguousarray(arr)
                size = max(host.nbytes, 1)
                dev, ret = acl.rt.malloc(size, 0)
                _check(ret, "acl.rt.malloc")
                owned.append(dev)
                if host.nbytes:
                    _check(acl.rt.memcpy(dev, size, acl.util.numpy_to_ptr(host), host.nbytes, _MEMCPY_HOST_TO_DEVICE),
                           "acl.rt.memcpy")
                buf = acl.create_data_buffer(dev, host.nbytes)
                buffers.append(buf)
                _, ret = acl.mdl.add_dataset_buffer(in_ds, buf)
                _check(ret, "acl.mdl.add_dataset_buffer")
            for i in range(n_out):
                size = acl.mdl.get_output_size_by_index(self.desc, i)
                dev = 0
                if size:
                    dev, ret = acl.rt.malloc(size, 0)
                    _check(ret, "acl.rt.malloc")
                    owned.append(dev)
                buf = acl.create_data_buffer(dev, size)
                buffers.append(buf)
                _, ret = acl.mdl.add_dataset_buffer(out_ds, buf)
                _check(ret, "acl.mdl.add_dataset_buffer")
            _check(acl.mdl.execute(self.model_id, in_ds, out_ds), "acl.mdl.execute")
            results = []
            for i in range(n_out):
                dims, ret = acl.mdl.get_cur_output_dims(self.desc, i)
                _check(ret, "acl.mdl.get_cur_output_dims")
                declared = self.output_types[i] if i < len(self.output_types) else None
                dtype = declared if declared is not None else _ACL_TO_NUMPY[acl.mdl.get_output_data_type(self.desc, i)]
                host = np.empty(dims["dims"], dtype=dtype)
                buf = acl.mdl.get_dataset_buffer(out_ds, i)
                dev = acl.get_data_buffer_addr(buf)
                if dev and dev not in owned:
                    owned.append(dev)  # allocated by the run: data-dependent shape
                if host.nbytes:
                    _check(acl.rt.memcpy(acl.util.numpy_to_ptr(host), host.nbytes, dev, host.nbytes,
                                         _MEMCPY_DEVICE_TO_HOST), "acl.rt.memcpy")
                results.append(host)
            return results
        finally:
            for buf in buffers:
                acl.destroy_data_buffer(buf)
            acl.mdl.destroy_dataset(in_ds)
            acl.mdl.destroy_dataset(out_ds)
            for dev in owned:
                acl.rt.free(dev)


class SoftnpuBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> SoftnpuRep:
        super().prepare(model, device, **kwargs)
        rep = SoftnpuRep(convert(model.SerializeToString(), kwargs.get("precision_mode", "must_keep_origin_dtype")))
        # numpy types of the outputs as ONNX declares them: ACL has no numbers for float8 E4M3FNUZ/E5M2FNUZ.
        rep.output_types = [onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)
                            if o.type.tensor_type.elem_type else None for o in model.graph.output]
        return rep

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        raise NotImplementedError("softnpu runs whole models (ONNX's node tests run models, not run_node)")
