"""ACL (libascendcl.so) through pyACL: initialization, devices, memory, error numbers, and offline models converted
by atc in the test, run through ACL and compared with PyTorch's CPU ops."""
import json
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import acl
import offline_models
from conftest import run_python

MiB = 1 << 20
H2D, D2H, D2D = 1, 2, 3
ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_UNINITIALIZE = 100001
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_INVALID_MODEL_ID = 100011
ACL_ERROR_PARSE_MODEL = 100013
ACL_ERROR_READ_MODEL_FAILURE = 100014
ACL_ERROR_MODEL_SIZE_INVALID = 100015
ACL_ERROR_MODEL_INPUT_NOT_MATCH = 100017
ACL_ERROR_MODEL_OUTPUT_NOT_MATCH = 100018
ACL_ERROR_MODEL_NOT_DYNAMIC = 100019
ACL_ERROR_REPEAT_FINALIZE = 100037
ACL_ERROR_RT_INVALID_DEVICEID = 107001
ACL_ERROR_RT_CONTEXT_NULL = 107002
ACL_ERROR_RT_MODEL_EXECUTE = 507011
ACL_FLOAT, ACL_INT64 = 0, 9
ACL_FORMAT_NCHW, ACL_FORMAT_ND = 0, 2


@pytest.fixture
def uninitialized():
    """ACL not initialized (as at the start of a process). Afterwards ACL is as it was: initialized with device 0
    current if other code of this process (softnpu.offline's ONNX backend) had initialized it."""
    was_initialized = acl.init() == ACL_ERROR_REPEAT_INITIALIZE
    assert acl.finalize() == 0
    yield
    acl.finalize()
    if was_initialized:
        assert acl.init() == 0 and acl.rt.set_device(0) == 0


@pytest.fixture
def device():
    """ACL initialized, device 0 current on this thread; finalized after the test unless it was initialized before."""
    ret = acl.init()
    assert ret in (0, ACL_ERROR_REPEAT_INITIALIZE)
    assert acl.rt.set_device(0) == 0
    yield 0
    if ret == 0:
        assert acl.finalize() == 0


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("om")
    conv, conv_w = offline_models.conv_net(d)
    mlp, mlp_w = offline_models.mlp(d)
    return {"conv": (conv, conv_w), "mlp": (mlp, mlp_w), "add_relu": offline_models.add_relu(d),
            "chain": offline_models.matmul_chain(d), "gather": offline_models.gather(d), "dir": d}


def ok(ret):
    assert ret == 0, f"ACL error {ret}: {acl.get_recent_err_msg()}"


def to_device(array):
    p, ret = acl.rt.malloc(max(array.nbytes, 1), 0)
    ok(ret)
    ok(acl.rt.memcpy(p, array.nbytes, acl.util.numpy_to_ptr(array), array.nbytes, H2D))
    return p


def from_device(ptr, shape, dtype=np.float32):
    out = np.empty(shape, dtype)
    ok(acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.nbytes, ptr, out.nbytes, D2H))
    return out


def conv_reference(x, w):
    """offline_models.conv_net with PyTorch's CPU ops."""
    t = {k: torch.from_numpy(v) for k, v in w.items()}
    y = F.linear(F.relu(F.conv2d(torch.from_numpy(x), t["W"], t["B"], padding=1)).mean((2, 3)), t["W2"], t["B2"])
    return y.numpy()


class Run:
    """What an ACL program sets up around a model: its description, and device buffers of the sizes it gives in
    datasets (an output of size 0 gets an empty buffer, which the run fills)."""

    def __init__(self, path):
        self.model_id, ret = acl.mdl.load_from_file(str(path))
        ok(ret)
        self.desc = acl.mdl.create_desc()
        ok(acl.mdl.get_desc(self.desc, self.model_id))
        self.inputs, self.outputs = acl.mdl.create_dataset(), acl.mdl.create_dataset()
        self.ptrs = []
        for dataset, count, size in ((self.inputs, acl.mdl.get_num_inputs(self.desc), acl.mdl.get_input_size_by_index),
                                     (self.outputs, acl.mdl.get_num_outputs(self.desc),
                                      acl.mdl.get_output_size_by_index)):
            for i in range(count):
                n = size(self.desc, i)
                p = 0
                if n:
                    p, ret = acl.rt.malloc(n, 0)
                    ok(ret)
                    self.ptrs.append(p)
                _, ret = acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(p, n))
                ok(ret)

    def execute(self, stream=None):
        """aclmdlExecute (aclmdlExecuteAsync on a stream), after freeing what the previous run allocated."""
        for i in range(acl.mdl.get_dataset_num_buffers(self.outputs)):
            buf = acl.mdl.get_dataset_buffer(self.outputs, i)
            p = acl.get_data_buffer_addr(buf)
            if p and p not in self.ptrs:
                ok(acl.rt.free(p))
                ok(acl.update_data_buffer(buf, 0, 0))
        if stream is None:
            return acl.mdl.execute(self.model_id, self.inputs, self.outputs)
        return acl.mdl.execute_async(self.model_id, self.inputs, self.outputs, stream)

    def input_ptr(self, i):
        return acl.get_data_buffer_addr(acl.mdl.get_dataset_buffer(self.inputs, i))

    def feed(self, i, array):
        ok(acl.rt.memcpy(self.input_ptr(i), acl.mdl.get_input_size_by_index(self.desc, i),
                         acl.util.numpy_to_ptr(np.ascontiguousarray(array)), array.nbytes, H2D))

    def output(self, i):
        dims, ret = acl.mdl.get_cur_output_dims(self.desc, i)
        ok(ret)
        return from_device(acl.get_data_buffer_addr(acl.mdl.get_dataset_buffer(self.outputs, i)), dims["dims"])

    def close(self):
        for dataset in (self.inputs, self.outputs):
            for i in range(acl.mdl.get_dataset_num_buffers(dataset)):
                buf = acl.mdl.get_dataset_buffer(dataset, i)
                p = acl.get_data_buffer_addr(buf)
                if p and p not in self.ptrs:
                    ok(acl.rt.free(p))  # allocated by the run
                ok(acl.destroy_data_buffer(buf))
            ok(acl.mdl.destroy_dataset(dataset))
        for p in self.ptrs:
            ok(acl.rt.free(p))
        ok(acl.mdl.destroy_desc(self.desc))
        ok(acl.mdl.unload(self.model_id))


# ---------------------------------------------------------------- initialization, devices, memory


def test_calls_before_init_fail_with_uninitialize(uninitialized, models):
    assert acl.rt.set_device(0) == ACL_ERROR_UNINITIALIZE
    assert "aclInit" in acl.get_recent_err_msg()
    assert acl.get_soc_name() is None
    assert acl.rt.malloc(1024, 0)[1] == ACL_ERROR_UNINITIALIZE
    assert acl.rt.create_stream()[1] == ACL_ERROR_UNINITIALIZE
    assert acl.mdl.load_from_file(str(models["conv"][0]))[1] == ACL_ERROR_UNINITIALIZE
    assert acl.finalize() == ACL_ERROR_REPEAT_FINALIZE


def test_repeat_init_and_init_after_finalize(uninitialized):
    assert acl.init() == 0
    assert acl.init() == ACL_ERROR_REPEAT_INITIALIZE
    assert "already initialized" in acl.get_recent_err_msg()
    assert acl.get_recent_err_msg() is None  # reading the message clears it
    assert acl.finalize() == 0
    assert acl.finalize() == ACL_ERROR_REPEAT_FINALIZE
    assert acl.init() == 0
    ok(acl.rt.set_device(0))
    assert acl.rt.get_device() == (0, 0)


def test_devices_and_contexts(uninitialized):
    ok(acl.init())
    assert acl.rt.malloc(1024, 0)[1] == ACL_ERROR_RT_CONTEXT_NULL  # no device set on this thread yet
    count, ret = acl.rt.get_device_count()
    ok(ret)
    assert count == torch.npu.device_count()
    for bad in (count, -1, 1000):
        assert acl.rt.set_device(bad) == ACL_ERROR_RT_INVALID_DEVICEID
        assert str(bad) in acl.get_recent_err_msg()
    assert acl.rt.get_run_mode() == (1, 0)  # ACL_HOST
    assert acl.get_soc_name() == torch.npu.get_device_name(0)  # what atc's --soc_version must name
    ok(acl.rt.set_device(count - 1))
    assert acl.rt.get_device() == (count - 1, 0)
    ctx, ret = acl.rt.create_context(0)
    ok(ret)
    assert acl.rt.get_device() == (0, 0) and acl.rt.get_context() == (ctx, 0)
    ok(acl.rt.destroy_context(ctx))
    assert acl.rt.get_device()[1] == ACL_ERROR_RT_CONTEXT_NULL  # the destroyed context was current
    assert acl.rt.set_context(ctx) == ACL_ERROR_INVALID_PARAM
    ok(acl.rt.set_device(0))
    ok(acl.rt.reset_device(0))
    assert acl.rt.malloc(1024, 0)[1] == ACL_ERROR_RT_CONTEXT_NULL


def test_malloc_memcpy_memset_round_trip(device):
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    a = to_device(x)
    b, ret = acl.rt.malloc(x.nbytes, 0)
    ok(ret)
    ok(acl.rt.memcpy(b, x.nbytes, a, x.nbytes, D2D))
    np.testing.assert_array_equal(from_device(b, x.shape), x)
    ok(acl.rt.memset(b, x.nbytes, 0, x.nbytes))
    np.testing.assert_array_equal(from_device(b, x.shape), np.zeros_like(x))
    # Asynchronous copies through pinned memory on a stream of its own.
    stream, ret = acl.rt.create_stream()
    ok(ret)
    pinned, ret = acl.rt.malloc_host(x.nbytes)
    ok(ret)
    ok(acl.rt.memcpy_async(b, x.nbytes, a, x.nbytes, D2D, stream))
    ok(acl.rt.memcpy_async(pinned, x.nbytes, b, x.nbytes, D2H, stream))
    ok(acl.rt.synchronize_stream(stream))
    np.testing.assert_array_equal(acl.util.ptr_to_numpy(pinned, x.shape, np.dtype(np.float32).num), x)
    assert acl.util.ptr_to_bytes(acl.util.numpy_to_ptr(x), 8) == x.tobytes()[:8]
    for p in (a, b):
        ok(acl.rt.free(p))
    ok(acl.rt.free_host(pinned))
    ok(acl.rt.destroy_stream(stream))


def test_device_memory_is_npu_memory(device):
    free0, total, ret = acl.rt.get_mem_info(1)  # ACL_HBM_MEM
    ok(ret)
    torch_free0, torch_total = torch.npu.mem_get_info(0)
    assert total == torch_total
    p, ret = acl.rt.malloc(64 * MiB, 0)
    ok(ret)
    free1, _, _ = acl.rt.get_mem_info(1)
    assert free0 - free1 >= 64 * MiB
    assert torch_free0 - torch.npu.mem_get_info(0)[0] >= 64 * MiB  # the same device memory torch.npu sees
    ok(acl.rt.free(p))
    assert acl.rt.get_mem_info(1)[0] == free0
    # Beyond the device's capacity: an error number, and the device still works.
    assert acl.rt.malloc(total + MiB, 0)[1] == 207001  # ACL_ERROR_RT_MEMORY_ALLOCATION
    p, ret = acl.rt.malloc(MiB, 0)
    ok(ret)
    ok(acl.rt.free(p))


def test_bad_memory_arguments_are_errors(device):
    x = np.zeros(16, np.float32)
    host = acl.util.numpy_to_ptr(x)
    d = to_device(x)
    assert acl.rt.malloc(0, 0)[1] == ACL_ERROR_INVALID_PARAM
    assert acl.rt.free(host) == ACL_ERROR_INVALID_PARAM
    assert acl.rt.free(d + 4) == ACL_ERROR_INVALID_PARAM  # not the start of an allocation
    assert acl.rt.memcpy(host, 8, d, 64, D2H) == ACL_ERROR_INVALID_PARAM  # count > destMax
    assert "destMax" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(host, 64, d, 64, H2D) == ACL_ERROR_INVALID_PARAM  # the kind says otherwise
    assert acl.rt.memcpy(host, 1 << 20, d, 1 << 20, D2H) == ACL_ERROR_INVALID_PARAM  # overruns the allocation
    assert "overrun" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(0, 64, d, 64, D2H) == ACL_ERROR_INVALID_PARAM
    assert acl.rt.memcpy(host, 64, d, 64, 9) == ACL_ERROR_INVALID_PARAM
    assert acl.rt.memset(host, 64, 0, 64) == ACL_ERROR_INVALID_PARAM
    ok(acl.rt.free(d))


# ---------------------------------------------------------------- models


def test_conv_model_through_acl_matches_cpu(device, models):
    path, w = models["conv"]
    run = Run(path)
    desc = run.desc
    assert acl.mdl.get_num_inputs(desc) == 1 and acl.mdl.get_num_outputs(desc) == 1
    assert acl.mdl.get_input_name_by_index(desc, 0) == "x" and acl.mdl.get_output_name_by_index(desc, 0) == "y"
    assert acl.mdl.get_input_dims(desc, 0) == ({"name": "x", "dimCount": 4, "dims": [1, 3, 8, 8]}, 0)
    assert acl.mdl.get_output_dims(desc, 0)[0]["dims"] == [1, 5]
    assert acl.mdl.get_input_size_by_index(desc, 0) == 3 * 8 * 8 * 4
    assert acl.mdl.get_output_size_by_index(desc, 0) == 5 * 4
    assert acl.mdl.get_input_data_type(desc, 0) == ACL_FLOAT and acl.mdl.get_output_data_type(desc, 0) == ACL_FLOAT
    assert acl.mdl.get_input_format(desc, 0) == ACL_FORMAT_NCHW
    assert acl.mdl.get_input_index_by_name(desc, "x") == (0, 0)
    assert acl.mdl.get_input_index_by_name(desc, "nope")[1] == ACL_ERROR_INVALID_PARAM
    assert acl.mdl.get_dynamic_batch(desc) == ({"batchCount": 0, "batch": []}, 0)

    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    run.feed(0, x)
    ok(run.execute())
    np.testing.assert_allclose(run.output(0), conv_reference(x, w), rtol=1e-5, atol=1e-5)
    run.close()


def test_load_from_mem_and_unload(device, models):
    data = models["chain"][0].read_bytes()  # 4 MiB of weights
    free_before = acl.rt.get_mem_info(1)[0]
    model_id, ret = acl.mdl.load_from_mem(acl.util.bytes_to_ptr(data), len(data))
    ok(ret)
    assert free_before - acl.rt.get_mem_info(1)[0] >= 4 * MiB  # the weights are in device memory
    desc = acl.mdl.create_desc()
    ok(acl.mdl.get_desc(desc, model_id))
    assert acl.mdl.get_num_inputs(desc) == 1
    ok(acl.mdl.unload(model_id))
    assert acl.mdl.unload(model_id) == ACL_ERROR_INVALID_MODEL_ID
    assert acl.mdl.get_desc(desc, model_id) == ACL_ERROR_INVALID_MODEL_ID
    ok(acl.mdl.destroy_desc(desc))
    assert acl.rt.get_mem_info(1)[0] == free_before  # unloading gave them back


def test_bad_model_bytes_are_errors(device, models):
    good = models["conv"][0].read_bytes()
    for data in (b"garbage" * 100, good[: len(good) // 2], good[:16], bytes(4096)):
        model_id, ret = acl.mdl.load_from_mem(data, len(data))
        assert ret == ACL_ERROR_PARSE_MODEL, (len(data), ret)
        assert acl.get_recent_err_msg()
    assert acl.mdl.load_from_mem(good, 0)[1] == ACL_ERROR_MODEL_SIZE_INVALID
    assert acl.mdl.load_from_file(str(models["dir"] / "missing.om"))[1] == ACL_ERROR_READ_MODEL_FAILURE
    # The device and ACL still work.
    model_id, ret = acl.mdl.load_from_file(str(models["conv"][0]))
    ok(ret)
    ok(acl.mdl.unload(model_id))


def test_corrupted_models_are_errors_never_crashes(models):
    """500 copies of a model with bytes overwritten (some truncated too), in a child so that a crash is a failure:
    each is ACL_ERROR_PARSE_MODEL, or loads and then runs or fails with ACL_ERROR_RT_MODEL_EXECUTE."""
    r = run_python(f"""
        import json, numpy as np, acl
        data = open({str(models["conv"][0])!r}, "rb").read()
        rng = np.random.default_rng(0)
        assert acl.init() == 0 and acl.rt.set_device(0) == 0
        seen = {{}}
        for _ in range(500):
            b = bytearray(data)
            for _ in range(rng.integers(1, 8)):
                b[rng.integers(0, len(b))] = rng.integers(0, 256)
            if rng.random() < 0.2:
                b = b[: rng.integers(1, len(b))]
            model_id, ret = acl.mdl.load_from_mem(bytes(b), len(b))
            seen[f"load {{ret}}"] = seen.get(f"load {{ret}}", 0) + 1
            if ret:
                continue
            desc = acl.mdl.create_desc()
            assert acl.mdl.get_desc(desc, model_id) == 0
            ins, outs, ptrs = acl.mdl.create_dataset(), acl.mdl.create_dataset(), []
            for dataset, count, size in ((ins, acl.mdl.get_num_inputs(desc), acl.mdl.get_input_size_by_index),
                                         (outs, acl.mdl.get_num_outputs(desc), acl.mdl.get_output_size_by_index)):
                for i in range(count):
                    n, p = size(desc, i), 0
                    if 0 < n < (1 << 30):
                        p, ret = acl.rt.malloc(n, 0)
                        ptrs.append(p)
                    acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(p, n))
            ret = acl.mdl.execute(model_id, ins, outs)
            seen[f"execute {{ret}}"] = seen.get(f"execute {{ret}}", 0) + 1
            for p in ptrs:
                acl.rt.free(p)
            assert acl.mdl.unload(model_id) == 0
        print(json.dumps(seen))
        """, timeout=600)
    seen = json.loads(r.lines[-1])
    assert set(seen) <= {"load 0", f"load {ACL_ERROR_PARSE_MODEL}", "execute 0", f"execute {ACL_ERROR_RT_MODEL_EXECUTE}",
                         f"execute {ACL_ERROR_INVALID_PARAM}"}, seen
    assert seen.get(f"load {ACL_ERROR_PARSE_MODEL}", 0) > 100


def test_wrong_datasets_are_errors(device, models):
    run = Run(models["conv"][0])
    mid = run.model_id
    assert acl.mdl.execute(mid + 1000, run.inputs, run.outputs) == ACL_ERROR_INVALID_MODEL_ID
    assert acl.mdl.execute(mid, 0, run.outputs) == ACL_ERROR_INVALID_PARAM
    assert acl.mdl.execute(mid, run.outputs, run.outputs) == ACL_ERROR_INVALID_PARAM  # 20-byte buffer for x
    assert "needs 768 bytes" in acl.get_recent_err_msg()
    empty = acl.mdl.create_dataset()
    assert acl.mdl.execute(mid, empty, run.outputs) == ACL_ERROR_MODEL_INPUT_NOT_MATCH
    assert acl.mdl.execute(mid, run.inputs, empty) == ACL_ERROR_MODEL_OUTPUT_NOT_MATCH
    # An input in ordinary host memory, and a too small output buffer.
    x = np.zeros((1, 3, 8, 8), np.float32)
    host_in = acl.mdl.create_dataset()
    acl.mdl.add_dataset_buffer(host_in, acl.create_data_buffer(acl.util.numpy_to_ptr(x), x.nbytes))
    assert acl.mdl.execute(mid, host_in, run.outputs) == ACL_ERROR_INVALID_PARAM
    assert "not device memory" in acl.get_recent_err_msg()
    small, ret = acl.rt.malloc(8, 0)
    ok(ret)
    small_out = acl.mdl.create_dataset()
    acl.mdl.add_dataset_buffer(small_out, acl.create_data_buffer(small, 8))
    assert acl.mdl.execute(mid, run.inputs, small_out) == ACL_ERROR_INVALID_PARAM
    # A buffer that claims more than its allocation holds.
    lying = acl.mdl.create_dataset()
    acl.mdl.add_dataset_buffer(lying, acl.create_data_buffer(small, 1 << 20))
    assert acl.mdl.execute(mid, run.inputs, lying) == ACL_ERROR_INVALID_PARAM
    assert acl.mdl.set_dynamic_batch_size(mid, run.inputs, 1, 1) == ACL_ERROR_MODEL_NOT_DYNAMIC
    # A stream of another device than the model's.
    ctx, ret = acl.rt.create_context(1)
    ok(ret)
    other, ret = acl.rt.create_stream()
    ok(ret)
    assert acl.mdl.execute_async(mid, run.inputs, run.outputs, other) == 107004  # ACL_ERROR_RT_MODEL_CONTEXT
    ok(acl.rt.destroy_stream(other))
    ok(acl.rt.destroy_context(ctx))
    ok(acl.rt.set_device(0))
    ok(acl.rt.free(small))
    # After all this the model runs.
    run.feed(0, np.ones((1, 3, 8, 8), np.float32))
    ok(run.execute())
    run.close()


def test_dynamic_batch(device, models):
    path, w = models["mlp"]
    run = Run(path)
    desc = run.desc
    assert acl.mdl.get_num_inputs(desc) == 2  # x and the dynamic tensor, as CANN's
    index, ret = acl.mdl.get_input_index_by_name(desc, "ascend_mbatch_shape_data")
    ok(ret)
    assert index == 1 and acl.mdl.get_input_data_type(desc, index) == ACL_INT64
    assert acl.mdl.get_dynamic_batch(desc) == ({"batchCount": 3, "batch": [1, 4, 8]}, 0)
    assert acl.mdl.get_input_dims(desc, 0)[0]["dims"] == [-1, 16]
    assert acl.mdl.get_input_size_by_index(desc, 0) == 8 * 16 * 4  # the largest profile
    assert acl.mdl.execute(run.model_id, run.inputs, run.outputs) == ACL_ERROR_INVALID_PARAM  # no profile chosen
    assert "aclmdlSetDynamicBatchSize" in acl.get_recent_err_msg()
    assert acl.mdl.set_dynamic_batch_size(run.model_id, run.inputs, index, 3) == ACL_ERROR_INVALID_PARAM
    assert acl.mdl.set_dynamic_batch_size(run.model_id, run.inputs, 0, 4) == ACL_ERROR_INVALID_PARAM
    # A dataset whose profile was set for another model (a batch size this one lacks).
    (models["dir"] / "other").mkdir(exist_ok=True)
    other = Run(offline_models.mlp(models["dir"] / "other", batch_profiles=(2, 3))[0])
    ok(acl.mdl.set_dynamic_batch_size(other.model_id, run.inputs, index, 3))
    assert acl.mdl.execute(run.model_id, run.inputs, run.outputs) == ACL_ERROR_INVALID_PARAM
    other.close()
    for batch in (4, 1, 8):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        ok(acl.mdl.set_dynamic_batch_size(run.model_id, run.inputs, index, batch))
        run.feed(0, x)
        ok(run.execute())
        ref = F.relu(torch.from_numpy(x) @ torch.from_numpy(w["W"]) + torch.from_numpy(w["b"]))
        assert acl.mdl.get_cur_output_dims(desc, 0)[0]["dims"] == [batch, 8]
        np.testing.assert_allclose(run.output(0), ref.numpy(), rtol=1e-5, atol=1e-5)
    run.close()


def test_dynamic_dims(device, models):
    run = Run(models["add_relu"])
    desc = run.desc
    assert acl.mdl.get_num_inputs(desc) == 3
    count, ret = acl.mdl.get_input_dynamic_gear_count(desc, -1)
    ok(ret)
    gears, ret = acl.mdl.get_input_dynamic_dims(desc, -1, count)
    ok(ret)
    assert [g["dims"] for g in gears] == [[2, 3, 2, 3], [4, 5, 4, 5]]
    bad = {"name": "", "dimCount": 4, "dims": [3, 3, 3, 3]}
    assert acl.mdl.set_input_dynamic_dims(run.model_id, run.inputs, 2, bad) == ACL_ERROR_INVALID_PARAM
    for a, b in ((4, 5), (2, 3)):
        rng = np.random.default_rng(a)
        x, z = (rng.standard_normal((a, b)).astype(np.float32) for _ in range(2))
        ok(acl.mdl.set_input_dynamic_dims(run.model_id, run.inputs, 2, {"dimCount": 4, "dims": [a, b, a, b]}))
        run.feed(0, x)
        run.feed(1, z)
        ok(run.execute())
        ref = torch.relu(torch.from_numpy(x)) + torch.from_numpy(z)
        np.testing.assert_array_equal(run.output(0), ref.numpy())
    run.close()


def test_threads_run_one_model_on_their_own_streams(device, models):
    """Each thread makes device 0 current (its own context), runs the shared model on a stream of its own with its
    own buffers, and gets its own results."""
    path, w = models["conv"]
    model_id, ret = acl.mdl.load_from_file(str(path))
    ok(ret)
    errors = []

    def worker(seed):
        try:
            ok(acl.rt.set_device(0))
            stream, ret = acl.rt.create_stream()
            ok(ret)
            x_dev, ret = acl.rt.malloc(768, 0)
            ok(ret)
            y_dev, ret = acl.rt.malloc(20, 0)
            ok(ret)
            ins, outs = acl.mdl.create_dataset(), acl.mdl.create_dataset()
            acl.mdl.add_dataset_buffer(ins, acl.create_data_buffer(x_dev, 768))
            acl.mdl.add_dataset_buffer(outs, acl.create_data_buffer(y_dev, 20))
            for i in range(10):
                x = np.random.default_rng(seed * 100 + i).standard_normal((1, 3, 8, 8)).astype(np.float32)
                ok(acl.rt.memcpy_async(x_dev, 768, acl.util.numpy_to_ptr(x), 768, H2D, stream))
                ok(acl.mdl.execute_async(model_id, ins, outs, stream))
                ok(acl.rt.synchronize_stream(stream))
                np.testing.assert_allclose(from_device(y_dev, (1, 5)), conv_reference(x, w), rtol=1e-5, atol=1e-5)
            for p in (x_dev, y_dev):
                ok(acl.rt.free(p))
            ok(acl.rt.destroy_stream(stream))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ok(acl.mdl.unload(model_id))


def test_failed_run_names_the_node_and_the_model_stays_usable(device, models):
    path, data = models["gather"]
    run = Run(path)
    run.feed(0, np.array([0, 7], np.int64))  # row 7 of a 4-row table
    assert run.execute() == ACL_ERROR_RT_MODEL_EXECUTE
    msg = acl.get_recent_err_msg()
    assert "Gather 'gather'" in msg and "out of range" in msg
    # Asynchronously, the next synchronization reports it.
    stream, ret = acl.rt.create_stream()
    ok(ret)
    ok(run.execute(stream))
    assert acl.rt.synchronize_stream(stream) == ACL_ERROR_RT_MODEL_EXECUTE
    ok(acl.rt.synchronize_stream(stream))  # reported once
    idx = np.array([3, 1], np.int64)
    run.feed(0, idx)
    ok(run.execute())
    np.testing.assert_array_equal(run.output(0), torch.from_numpy(data)[torch.from_numpy(idx)].numpy())
    ok(acl.rt.destroy_stream(stream))
    run.close()


def test_execute_async_returns_before_the_run_completes(device, models):
    """A model of hundreds of milliseconds (12 chained 1024x1024 matmuls): execute_async returns while the stream
    still runs it; the output is there once aclrtSynchronizeStream returns."""
    path, w = models["chain"]
    run = Run(path)
    stream, ret = acl.rt.create_stream()
    ok(ret)
    x = np.random.default_rng(4).standard_normal((1024, 1024)).astype(np.float32)
    run.feed(0, x)
    out_ptr = acl.get_data_buffer_addr(acl.mdl.get_dataset_buffer(run.outputs, 0))
    ok(acl.rt.memset(out_ptr, x.nbytes, 0, x.nbytes))
    ok(run.execute(stream))
    assert acl.rt.stream_query(stream) == (1, 0)  # ACL_STREAM_STATUS_NOT_READY
    ok(acl.rt.synchronize_stream(stream))
    assert acl.rt.stream_query(stream) == (0, 0)
    ref = torch.from_numpy(x)
    for _ in range(12):
        ref = ref @ torch.from_numpy(w)
    np.testing.assert_allclose(run.output(0), ref.numpy(), rtol=1e-4, atol=1e-4)
    ok(acl.rt.destroy_stream(stream))
    run.close()


def test_unload_waits_for_queued_runs(device, models):
    path, _ = models["chain"]
    run = Run(path)
    stream, ret = acl.rt.create_stream()
    ok(ret)
    run.feed(0, np.ones((1024, 1024), np.float32))
    ok(run.execute(stream))
    ok(acl.mdl.unload(run.model_id))  # returns once the run completed, the weights no longer in use
    assert acl.rt.stream_query(stream) == (0, 0)
    ok(acl.rt.synchronize_stream(stream))
    run.model_id = acl.mdl.load_from_file(str(path))[0]
    run.close()
    ok(acl.rt.destroy_stream(stream))


def test_event_timestamps_and_elapsed_time_agree(device):
    """aclrtEventGetTimestamp: when an event's work completed (microseconds), consistent with aclrtEventElapsedTime."""
    stream, ret = acl.rt.create_stream()
    ok(ret)
    (start, r1), (end, r2) = acl.rt.create_event(), acl.rt.create_event()
    ok(r1), ok(r2)
    ok(acl.rt.record_event(start, stream))
    buf, ret = acl.rt.malloc(1 << 24, 0)
    ok(ret)
    ok(acl.rt.memset_async(buf, 1 << 24, 0, 1 << 24, stream))
    ok(acl.rt.record_event(end, stream))
    ok(acl.rt.synchronize_event(end))
    (t0, r1), (t1, r2) = acl.rt.event_get_timestamp(start), acl.rt.event_get_timestamp(end)
    ok(r1), ok(r2)
    ms, ret = acl.rt.event_elapsed_time(start, end)
    ok(ret)
    assert 0 < t0 <= t1 and abs((t1 - t0) / 1000 - ms) < 0.01, (t0, t1, ms)
    ok(acl.rt.free(buf))
    for e in (start, end):
        ok(acl.rt.destroy_event(e))
    ok(acl.rt.destroy_stream(stream))
