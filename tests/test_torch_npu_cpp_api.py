"""torch_npu's C++ extension API (csrc/torch_npu_api): the headers and libraries where extension builders look, the
example extension (examples/npu_extension) built with torch_npu.utils.cpp_extension and run on the current stream
against the CPU, and libopapi.so's two-phase aclnn operators called as an extension calls them (here through ctypes)."""

import ctypes
import json
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
import torch_npu

REPO = Path(__file__).resolve().parents[1]
TORCH_NPU = Path(torch_npu.__file__).parent
ASCEND_HOME = Path(os.environ["ASCEND_HOME_PATH"])
# A build directory that survives the run: torch's JIT builder recompiles only when the sources change.
EXTENSION_BUILD = REPO / "build" / "npu_extension"


def test_headers_and_libraries_at_torch_npus_paths():
    include = TORCH_NPU / "include"
    for header in ["torch_npu/csrc/core/npu/NPUStream.h", "torch_npu/csrc/core/npu/NPUGuard.h",
                   "torch_npu/csrc/core/npu/NPUCachingAllocator.h", "torch_npu/csrc/core/npu/NPUFormat.h",
                   "torch_npu/csrc/core/npu/DeviceUtils.h", "torch_npu/csrc/framework/OpCommand.h",
                   "torch_npu/csrc/framework/utils/OpAdapter.h", "torch_npu/csrc/aten/NPUNativeFunctions.h",
                   "third_party/acl/inc/acl/acl.h"]:
        assert (include / header).is_file(), header
    assert (TORCH_NPU / "lib" / "libtorch_npu.so").is_file()
    assert (ASCEND_HOME / "lib64" / "libascendcl.so").is_file()
    assert (ASCEND_HOME / "lib64" / "libopapi.so").is_file()
    assert (ASCEND_HOME / "include" / "aclnnop" / "aclnn_add.h").is_file()


def test_cpp_extension_helpers():
    from torch_npu.utils.cpp_extension import NpuExtension, include_paths, library_paths

    ext = NpuExtension("demo", ["demo.cpp"], include_dirs=["mine"])
    assert ext.include_dirs[0] == "mine"
    assert str(TORCH_NPU / "include") in ext.include_dirs and str(TORCH_NPU / "include") in include_paths()
    assert "torch_npu" in ext.libraries and str(TORCH_NPU / "lib") in ext.library_dirs
    assert str(ASCEND_HOME / "lib64") in library_paths()
    assert ext.language == "c++"


@pytest.fixture(scope="module")
def example_ops():
    spec = importlib.util.spec_from_file_location("npu_extension_run", REPO / "examples" / "npu_extension" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    run.build(str(EXTENSION_BUILD))
    return torch.ops.example_ops


def test_example_extension_matches_cpu(example_ops):
    torch.manual_seed(0)
    x, y, gate, up = (torch.randn(32, 48) for _ in range(4))
    torch.testing.assert_close(example_ops.axpy(x.npu(), y.npu(), 0.25).cpu(), y + 0.25 * x)
    torch.testing.assert_close(example_ops.swiglu(gate.npu(), up.npu()).cpu(), torch.nn.functional.silu(gate) * up)
    hidden, gamma = torch.randn(2, 5, 48), torch.rand(48) + 0.5
    y, rstd = example_ops.rms_norm(hidden.npu(), gamma.npu(), 1e-5)
    expected_rstd = torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(rstd.cpu(), expected_rstd)
    torch.testing.assert_close(y.cpu(), hidden * expected_rstd * gamma)


def test_example_extension_runs_on_the_current_stream(example_ops):
    gate, up = torch.randn(256, 256).npu(), torch.randn(256, 256).npu()
    torch.npu.synchronize()
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        torch.npu._sleep(50_000_000)  # 50 ms of device time ahead of the operators on the side stream
        out = example_ops.swiglu(gate, up)
        axpy = example_ops.axpy(gate, up, 2.0)
    # Both operators were queued behind the sleep on the side stream; the default stream has nothing.
    assert not side.query()
    assert torch.npu.default_stream().query()
    side.synchronize()
    torch.testing.assert_close(out.cpu(), torch.nn.functional.silu(gate.cpu()) * up.cpu())
    torch.testing.assert_close(axpy.cpu(), up.cpu() + 2.0 * gate.cpu())


def test_operator_errors_raise(example_ops):
    with pytest.raises(RuntimeError, match="gate and up must have the same shape"):
        example_ops.swiglu(torch.randn(2, 3).npu(), torch.randn(3, 2).npu())


# ---- libopapi.so through ctypes, as an extension's dlopen/dlsym reaches it.

ACL_FLOAT, ACL_FLOAT16, ACL_INT64 = 0, 1, 9
ACL_FORMAT_ND = 2


@pytest.fixture(scope="module")
def opapi():
    lib = ctypes.CDLL("libopapi.so")  # the copy torch_npu's import loaded
    lib.aclCreateTensor.restype = ctypes.c_void_p
    lib.aclCreateTensor.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_uint64, ctypes.c_int,
                                    ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_int,
                                    ctypes.POINTER(ctypes.c_int64), ctypes.c_uint64, ctypes.c_void_p]
    lib.aclCreateScalar.restype = ctypes.c_void_p
    lib.aclCreateScalar.argtypes = [ctypes.c_void_p, ctypes.c_int]
    for name in ["aclDestroyTensor", "aclDestroyScalar"]:
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    return lib


def acl_tensor(lib, t):
    """An aclTensor over an npu tensor's storage (view shape, strides and offset in elements)."""
    dtype = {torch.float32: ACL_FLOAT, torch.float16: ACL_FLOAT16, torch.int64: ACL_INT64}[t.dtype]
    dims = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
    strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
    storage = (ctypes.c_int64 * 1)(t.untyped_storage().nbytes() // t.element_size())
    return lib.aclCreateTensor(dims, t.dim(), dtype, strides, t.storage_offset(), ACL_FORMAT_ND, storage, 1,
                               t.untyped_storage().data_ptr())


def two_phases(lib, name, *args):
    """aclnnXxxGetWorkspaceSize(args..., &size, &executor), then aclnnXxx(NULL, size, executor, current stream)."""
    size, executor = ctypes.c_uint64(), ctypes.c_void_p()
    status = getattr(lib, name + "GetWorkspaceSize")(*args, ctypes.byref(size), ctypes.byref(executor))
    assert status == 0, f"{name}GetWorkspaceSize: {status}"
    assert size.value == 0
    run = getattr(lib, name)
    run.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p]
    return run(None, size, executor, torch.npu.current_stream().native_handle)


def test_aclnn_add_and_matmul_match_cpu(opapi):
    torch.manual_seed(1)
    a, b = torch.randn(16, 24), torch.randn(24, 8)
    na, nb = a.npu(), b.npu()
    # A strided view (transposed, offset): the descriptor carries strides and the storage offset.
    other = torch.randn(40, 16).npu()[4:28].t()
    out = torch.empty(16, 24).npu()
    alpha = ctypes.c_float(0.5)
    ta, to, tout = acl_tensor(opapi, na), acl_tensor(opapi, other), acl_tensor(opapi, out)
    s_alpha = opapi.aclCreateScalar(ctypes.byref(alpha), ACL_FLOAT)
    opapi.aclnnAddGetWorkspaceSize.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_void_p, ctypes.c_void_p]
    assert two_phases(opapi, "aclnnAdd", ta, to, s_alpha, tout) == 0
    mm_out = torch.empty(16, 8).npu()
    tb, tmm = acl_tensor(opapi, nb), acl_tensor(opapi, mm_out)
    opapi.aclnnMatmulGetWorkspaceSize.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int8] + [ctypes.c_void_p] * 2
    assert two_phases(opapi, "aclnnMatmul", ta, tb, tmm, ctypes.c_int8(1)) == 0
    for t in [ta, to, tout, tb, tmm]:
        opapi.aclDestroyTensor(t)
    opapi.aclDestroyScalar(s_alpha)
    torch.testing.assert_close(out.cpu(), a + 0.5 * other.cpu())
    torch.testing.assert_close(mm_out.cpu(), a @ b)


def test_aclnn_rms_norm_and_cast_match_cpu(opapi):
    x, gamma = torch.randn(4, 6, 32), torch.rand(32) + 0.5
    y, rstd = torch.empty(4, 6, 32).npu(), torch.empty(4, 6, 1).npu()
    # An aclTensor only points at device memory (as on CANN): the tensors it describes must outlive the operator.
    nx, ngamma = x.npu(), gamma.npu()
    tx, tg, ty, tr = (acl_tensor(opapi, t) for t in [nx, ngamma, y, rstd])
    opapi.aclnnRmsNormGetWorkspaceSize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double,
                                                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    assert two_phases(opapi, "aclnnRmsNorm", tx, tg, ctypes.c_double(1e-6), ty, tr) == 0
    half = torch.empty(4, 6, 32, dtype=torch.float16).npu()
    th = acl_tensor(opapi, half)
    opapi.aclnnCastGetWorkspaceSize.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_void_p]
    assert two_phases(opapi, "aclnnCast", ty, ACL_FLOAT16, th) == 0
    expected_rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rstd.cpu(), expected_rstd)
    torch.testing.assert_close(y.cpu(), x * expected_rstd * gamma)
    torch.testing.assert_close(half.cpu(), (x * expected_rstd * gamma).half())
    # A mismatch is CANN's status, not a crash: the cast's output dtype must be the one asked for.
    size, executor = ctypes.c_uint64(), ctypes.c_void_p()
    assert opapi.aclnnCastGetWorkspaceSize(ty, ACL_INT64, th, ctypes.byref(size), ctypes.byref(executor)) == 161002
    for t in [tx, tg, ty, tr, th]:
        opapi.aclDestroyTensor(t)


def test_aclnn_on_an_acl_stream_keeps_that_streams_order(opapi):
    """A stream of ACL's own (aclrtCreateStream) is not one of torch.npu's: the operator runs on the current stream,
    ordered after the work queued on the ACL stream before it, and the ACL stream's later work (here
    aclrtSynchronizeStream) waits for the operator."""
    import acl

    status = acl.init()
    assert status in (0, 100002)  # ACL_ERROR_REPEAT_INITIALIZE: another test initialized it
    initialized_here = status == 0
    assert acl.rt.set_device(0) == 0
    stream, status = acl.rt.create_stream()
    assert status == 0
    try:
        a, b = torch.randn(64, 64).npu(), torch.randn(64, 64).npu()
        out = torch.zeros(64, 64).npu()
        torch.npu.synchronize()
        ta, tb, tout = acl_tensor(opapi, a), acl_tensor(opapi, b), acl_tensor(opapi, out)
        opapi.aclnnMulGetWorkspaceSize.argtypes = [ctypes.c_void_p] * 5
        size, executor = ctypes.c_uint64(), ctypes.c_void_p()
        assert opapi.aclnnMulGetWorkspaceSize(ta, tb, tout, ctypes.byref(size), ctypes.byref(executor)) == 0
        opapi.aclnnMul.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p]
        torch.npu._sleep(50_000_000)  # 50 ms on the current stream, ahead of the operator
        assert opapi.aclnnMul(None, 0, executor, stream) == 0
        assert not torch.npu.current_stream().query()
        assert acl.rt.synchronize_stream(stream) == 0
        assert torch.npu.current_stream().query()  # the ACL stream's wait covered the operator (and the sleep)
        torch.testing.assert_close(out.cpu(), a.cpu() * b.cpu())
        for t in [ta, tb, tout]:
            opapi.aclDestroyTensor(t)
    finally:
        acl.rt.destroy_stream(stream)
        if initialized_here:
            acl.finalize()


def test_aclnn_elementwise_and_inplace_operators_match_cpu(opapi):
    torch.manual_seed(2)
    a, b = torch.randn(6, 10), torch.rand(6, 10) + 0.5
    na, nb = a.npu(), b.npu()
    p = ctypes.c_void_p
    two = ctypes.c_float(2.0)
    s_two = opapi.aclCreateScalar(ctypes.byref(two), ACL_FLOAT)
    results = {}
    made = []

    def t(tensor):
        made.append(acl_tensor(opapi, tensor))
        return made[-1]

    def run(name, argtypes, *args):
        getattr(opapi, name + "GetWorkspaceSize").argtypes = argtypes + [p, p]
        assert two_phases(opapi, name, *args) == 0, name

    for name in ["aclnnRelu", "aclnnSilu"]:
        out = torch.empty(6, 10).npu()
        run(name, [p, p], t(na), t(out))
        results[name] = out
    for name in ["aclnnDiv", "aclnnMul"]:
        out = torch.empty(6, 10).npu()
        run(name, [p, p, p], t(na), t(nb), t(out))
        results[name] = out
    out = torch.empty(6, 10).npu()
    run("aclnnSub", [p, p, p, p], t(na), t(nb), s_two, t(out))
    results["aclnnSub"] = out
    out = torch.empty(6, 10).npu()
    run("aclnnMuls", [p, p, p], t(na), s_two, t(out))
    results["aclnnMuls"] = out
    out = torch.empty(6, 10).npu()
    run("aclnnSoftmax", [p, ctypes.c_int64, p], t(na), ctypes.c_int64(1), t(out))
    results["aclnnSoftmax"] = out
    zeroed, filled, copied = na.clone(), na.clone(), torch.empty(6, 10).npu()
    run("aclnnInplaceZero", [p], t(zeroed))
    run("aclnnInplaceFillScalar", [p, p], t(filled), s_two)
    run("aclnnInplaceCopy", [p, p], t(copied), t(nb))
    opapi.aclDestroyScalar(s_two)
    for descriptor in made:
        opapi.aclDestroyTensor(descriptor)

    expected = {"aclnnRelu": a.relu(), "aclnnSilu": torch.nn.functional.silu(a), "aclnnDiv": a / b,
                "aclnnMul": a * b, "aclnnSub": a - 2 * b, "aclnnMuls": a * 2, "aclnnSoftmax": a.softmax(1)}
    for name, want in expected.items():
        torch.testing.assert_close(results[name].cpu(), want, msg=name)
    torch.testing.assert_close(zeroed.cpu(), torch.zeros(6, 10))
    torch.testing.assert_close(filled.cpu(), torch.full((6, 10), 2.0))
    torch.testing.assert_close(copied.cpu(), b)


@pytest.fixture(scope="module")
def op_command():
    from torch_npu.utils.cpp_extension import load

    build = REPO / "build" / "torch_npu_api_test"
    build.mkdir(parents=True, exist_ok=True)
    load("torch_npu_api_test", [str(REPO / "tests" / "torch_npu_api" / "op_command_ops.cpp")],
         build_directory=str(build), is_python_module=False)
    return torch.ops.torch_npu_api_test.op_command


OP_COMMAND_CASES = [
    # type, inputs, host list, output shape/dtype, true attributes, float attribute, CPU reference
    ("Add", 2, None, (4, 6), [], "", 0.0, lambda a, b: a + b),
    ("RealDiv", 2, None, (4, 6), [], "", 0.0, lambda a, b: a / b),
    ("Maximum", 2, None, (4, 6), [], "", 0.0, torch.maximum),
    ("Axpy", 2, None, (4, 6), [], "alpha", 0.5, lambda a, b: a + 0.5 * b),
    ("Muls", 1, None, (4, 6), [], "value", 3.0, lambda a: a * 3),
    ("Sigmoid", 1, None, (4, 6), [], "", 0.0, torch.sigmoid),
    ("Rsqrt", 1, None, (4, 6), [], "", 0.0, torch.rsqrt),
    ("MatMul", 2, None, (4, 4), ["transpose_x2"], "", 0.0, lambda a, b: a @ b.t()),
    ("BatchMatMul", 2, None, (6, 6), ["adj_x1"], "", 0.0, lambda a, b: a.t() @ b),
    ("ReduceSum", 1, [1], (4, 1), ["keep_dims"], "", 0.0, lambda a: a.sum(1, keepdim=True)),
    ("ReduceMean", 1, [0], (6,), [], "", 0.0, lambda a: a.mean(0)),
    ("Transpose", 1, [1, 0], (6, 4), [], "", 0.0, lambda a: a.t()),
    ("SoftmaxV2", 1, None, (4, 6), [], "", 0.0, lambda a: a.softmax(-1)),
    ("Cast", 1, None, ((4, 6), torch.float16), [], "", 0.0, lambda a: a.half()),
]


@pytest.mark.parametrize("case", OP_COMMAND_CASES, ids=[c[0] for c in OP_COMMAND_CASES])
def test_op_command_types_match_cpu(op_command, case):
    name, n_inputs, host, out_spec, flags, attr, value, reference = case
    torch.manual_seed(3)
    inputs = [torch.rand(4, 6) + 0.5 for _ in range(n_inputs)]
    shape, dtype = out_spec if isinstance(out_spec[-1], torch.dtype) else (out_spec, torch.float32)
    out = torch.empty(shape, dtype=dtype).npu()
    op_command(name, [t.npu() for t in inputs], host, out, flags, attr, value)
    torch.testing.assert_close(out.cpu(), reference(*inputs))


def test_op_command_errors(op_command):
    x = torch.ones(2, 2).npu()
    with pytest.raises(NotImplementedError, match="'ROIAlign' is not one softnpu provides"):
        op_command("ROIAlign", [x], None, torch.empty(2, 2).npu(), [], "", 0.0)
    with pytest.raises(RuntimeError, match=r"output 0 has shape \[3, 3\]"):
        op_command("Add", [x, x], None, torch.empty(3, 3).npu(), [], "", 0.0)


API_CALLS = REPO / "tests" / "torch_npu_api" / "api_calls.cpp"
API_CALLS_BUILD = REPO / "build" / "torch_npu_api_calls"


def load_api_calls():
    from torch_npu.utils.cpp_extension import load

    API_CALLS_BUILD.mkdir(parents=True, exist_ok=True)
    return load("torch_npu_api_calls", [str(API_CALLS)], build_directory=str(API_CALLS_BUILD))


@pytest.fixture(scope="module")
def api_calls():
    return load_api_calls()


def test_init_npu_synchronize_and_device_functions(api_calls):
    out = api_calls.device_lifecycle(0)
    assert out["current_after_init"] == 0 and out["get_device"] == 0
    assert out["get_device_status"] == 0 and out["set_device_status"] == 0
    assert out["set_device_bad_status"] == 100000  # ACL_ERROR_INVALID_PARAM
    assert torch.npu.current_device() == 0


def test_npu_event_is_a_runtime_event(api_calls):
    out = api_calls.events(torch.randn(64, 64).npu())
    assert out["created_before_record"] is False and out["device_before_record"] is False
    assert out["query"] and out["elapsed_ms_nonnegative"] and out["event_handle"]
    assert out["device"] == 0 and out["acl_sync"] == 0  # ACL's event calls take it


def test_npu_event_ipc_handle_opens_in_place(api_calls):
    x = torch.randn(16).npu()
    out = api_calls.ipc_event(x)
    assert out["created_by_handle"] and out["opened_query"]
    torch.testing.assert_close(out["result"].cpu(), x.cpu() * 3)
    assert "ACL_EVENT_IPC" in out["plain_ipc_error"]


def test_npu_stream_marks_and_pool(api_calls):
    out = api_calls.streams()
    assert out["pool_is_not_default"] and out["current_is_pool"] and out["need_empty_same_handle"]
    assert (out["marked_before"], out["marked_copy"], out["marked_after"]) == (False, True, False)
    assert torch.npu.current_stream() == torch.npu.default_stream()


def test_warning_state_is_torch_npus_sync_debug_mode(api_calls):
    before = torch.npu.get_sync_debug_mode()
    assert api_calls.sync_debug_mode(1) == 1
    assert api_calls.sync_debug_mode(2) == 102  # L_ERROR: warn_or_error_on_sync raised
    assert torch.npu.get_sync_debug_mode() == before


def test_formats_and_swapped_memory(api_calls):
    x = torch.randn(2, 3).npu()
    out = api_calls.formats(x)
    assert out["storage_sizes"] == [2, 3] and out["format"] == 2  # ACL_FORMAT_ND
    assert out["swapped"].device.type == "npu" and out["swapped"].shape == (3, 4)


def test_c10_npu_get_error_message_is_acls(api_calls):
    assert "size must be greater than 0" in api_calls.acl_error_message()


def test_op_command_inputs_match_cpu(api_calls):
    torch.manual_seed(4)
    a, b = torch.rand(4, 6) + 0.5, torch.rand(4, 6)
    out = api_calls.op_command_inputs(a.npu(), b.npu())
    torch.testing.assert_close(out["inputs"].cpu(), a + b)
    torch.testing.assert_close(out["expect"].cpu(), a.int().float() + b)
    torch.testing.assert_close(out["scalar_tensor"].cpu(), a + 2.5)
    torch.testing.assert_close(out["host_values"].cpu(), a.t())
    torch.testing.assert_close(out["host_doubles"].cpu(), a + 0.25)
    torch.testing.assert_close(out["attr_cond"].cpu(), a.sum(1))  # keep_dims given with cond false


def test_trace_tracker_and_acl_memory_in_torch_npus_process(api_calls):
    """In a fresh process (the tracker stays attached for the process's life; another test of this process may have
    finalized ACL): a trace tracker sees the caching allocator's segment allocations and frees, recorded history or
    not, and an extension's ACL calls work without aclInit, as in torch_npu's process."""
    from conftest import run_python

    r = run_python(f"""
        import importlib.util, json, sys, torch, torch_npu
        sys.path.insert(0, {str(REPO / "tests")!r})
        spec = importlib.util.spec_from_file_location("t", {__file__!r})
        t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)
        calls = t.load_api_calls()
        calls.attach_trace_tracker()
        torch.npu.empty_cache()
        before = calls.trace_counts()
        x = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="npu")
        after_alloc = calls.trace_counts()
        del x
        torch.npu.empty_cache()
        after_free = calls.trace_counts()
        print(json.dumps(dict(before=before, after_alloc=after_alloc, after_free=after_free,
                              acl=calls.acl_malloc_align32(4096))))
    """)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["after_alloc"]["segment_alloc"] > out["before"]["segment_alloc"]
    assert out["after_alloc"]["alloc"] > out["before"]["alloc"]
    assert out["after_free"]["segment_free"] > out["after_alloc"]["segment_free"]
    assert out["acl"] == {"malloc": 0, "aligned": True, "memset": 0, "memcpy": 0, "all_sevens": True, "free": 0}


def test_generator_is_torch_npus_interface(api_calls):
    state = torch.npu.get_rng_state()
    try:
        out = api_calls.generator(1234)
        assert out["draw"] == [1234, 8] and out["state"] == [1234, 20, 0]
        assert out["offset_after"] == 24 and out["philox_offset"] == 24 and out["clone"] == [1234, 24]
        assert torch.npu.initial_seed() == 1234  # the generator torch.npu seeds
        assert out["device_type_npu"] and out["fresh_seed"] == 67280421310721  # c10's default seed
    finally:
        torch.npu.set_rng_state(state)


def test_registered_hooks_are_npu_hooks_interface(api_calls):
    assert api_calls.hooks() == {"is_npu_hooks": True, "same_generator": True, "available": True}


def test_process_group_hccl_batch_isend_irecv(api_calls, tmp_path):
    """Two ranks exchange tensors through c10d_npu::ProcessGroupHCCL::batch_isend_irecv (one Work for the batch),
    the backend of their process group reached from C++ as on torch_npu."""
    from conftest import start_python

    code = """
        import importlib.util, sys, torch, torch_npu
        import torch.distributed as dist
        spec = importlib.util.spec_from_file_location("t", {test!r})
        t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)
        calls = t.load_api_calls()
        rank = {rank}
        dist.init_process_group("hccl", init_method="file://{store}", rank=rank, world_size=2)
        backend = dist.group.WORLD._get_backend(torch.device("npu"))
        out, into = torch.full((4,), float(rank + 1), device="npu"), torch.zeros(4, device="npu")
        calls.batch_isend_irecv(backend, out, into, 1 - rank)
        print(into.cpu().tolist())
        dist.barrier()
        dist.destroy_process_group()
    """
    children = [start_python(code.format(test=__file__, rank=rank, store=tmp_path / "store")) for rank in range(2)]
    results = [child.wait() for child in children]
    assert results[0].lines[-1] == "[2.0, 2.0, 2.0, 2.0]", results[0].describe()
    assert results[1].lines[-1] == "[1.0, 1.0, 1.0, 1.0]", results[1].describe()


def test_npu_dropout_gen_mask(api_calls):
    """op-plugin's npu_dropout_gen_mask: uint8 keep bits (least significant first) padded to 128 elements; p=0 keeps
    every element's byte whole (torch_npu's reference); the fraction kept is 1 - p; (seed, offset) fix the mask."""
    x = torch.randn(17, 19).npu()  # 323 elements: 41 bytes of bits, 48 bytes in all
    full = api_calls.dropout_gen_mask(x, [17, 19], 0.0, 1, 0).cpu()
    assert full.dtype == torch.uint8 and full.shape == (48,)
    assert full[:41].eq(255).all() and full[41:].eq(0).all()
    big = torch.empty(256, 1024).npu()
    mask = api_calls.dropout_gen_mask(big, [256, 1024], 0.4, 7, 0).cpu()
    kept = torch.stack([(mask >> i) & 1 for i in range(8)]).float().mean().item()
    assert abs(kept - 0.6) < 0.01
    assert torch.equal(mask, api_calls.dropout_gen_mask(big, [256, 1024], 0.4, 7, 0).cpu())
    assert not torch.equal(mask, api_calls.dropout_gen_mask(big, [256, 1024], 0.4, 7, 4).cpu())
    assert not torch.equal(mask, api_calls.dropout_gen_mask(big, [256, 1024], 0.4, 8, 0).cpu())
