"""torch_npu's Ascend-specific Python surface: the torch.npu names that have no torch.cuda counterpart, each against
what torch_npu documents (or, for a hardware setting, accepted, validated and read back), and the torch_npu._C names
libraries reach directly (ProcessGroupHCCL.Options().hccl_config, _storage_Use_Count, _weak_ref_tensor), the dtype
numbers, FlopsCounter and the default backend of npu."""

import json
import textwrap
import types
import warnings

import pytest
import torch
import torch_npu

from conftest import run_python

# torch_npu's Ascend-specific torch.npu names: torch_npu/npu/__init__.py's __all__ at Ascend/pytorch tag
# v26.2.0-beta.1-pytorch2.13.0 (commit 94c0533b, torch_npu for torch 2.13), less the names torch.cuda has and the 99
# CUDA-equivalent ones of tests/test_npu_surface.py (NPUGraph, ExternalEvent, host_empty_cache, matmul, conv, ...).
ASCEND_SPECIFIC_NAMES = """
set_dump init_dump finalize_dump empty_virt_addr_cache set_option CubeMathType set_aoe set_compile_mode
set_mm_bmm_format_nd get_mm_bmm_format_nd get_npu_overflow_flag clear_npu_overflow_flag stress_detect
is_jit_compile_false get_amp_supported_dtype stop_device restart_device check_uce_in_memory config
enable_deterministic_with_backward disable_deterministic_with_backward mstx SyncLaunchStream graph_task_group_begin
graph_task_group_end graph_task_update_begin graph_task_update_end set_device_limit get_device_limit set_stream_limit
reset_stream_limit get_stream_limit obfuscation_initialize obfuscation_finalize obfuscation_calculate
set_op_timeout_ms set_deterministic_level use_compatible_impl are_compatible_impl_enabled NpuGraphOpHandler
register_npu_graph_handler super_kernel_scope_begin super_kernel_scope_end npurt
""".split()
# Made by other parts of softnpu (device recovery: issue 37; mstx: the profiler, issue 31).
ELSEWHERE = {"stop_device", "restart_device", "check_uce_in_memory", "mstx"}


def test_share_of_ascend_specific_names():
    assert len(ASCEND_SPECIFIC_NAMES) == len(set(ASCEND_SPECIFIC_NAMES)) == 44
    present = [n for n in ASCEND_SPECIFIC_NAMES if hasattr(torch.npu, n)]
    print(f"torch_npu's Ascend-specific torch.npu names present: {len(present)} of {len(ASCEND_SPECIFIC_NAMES)}")
    assert set(ASCEND_SPECIFIC_NAMES) - set(present) <= ELSEWHERE
    assert (set(ASCEND_SPECIFIC_NAMES) - ELSEWHERE) <= set(torch.npu.__all__)
    assert torch_npu.npu.SyncLaunchStream is torch.npu.SyncLaunchStream


def test_set_option_validates_as_torch_npu_and_records():
    torch.npu.set_option({"ACL_PRECISION_MODE": "must_keep_origin_dtype", "ACL_AICORE_NUM": 8})
    assert torch.npu.get_option("ACL_PRECISION_MODE") == "must_keep_origin_dtype"
    assert torch.npu.get_option("ACL_AICORE_NUM") == "8"
    with pytest.raises(ValueError, match="ACL_PRECISION_MODE"):
        torch.npu.set_option({"ACL_PRECISION_MODE": "fastest"})
    with pytest.raises(ValueError, match="ACL_AICORE_NUM"):
        torch.npu.set_option({"ACL_AICORE_NUM": "33"})
    with pytest.warns(UserWarning, match="deprecated"):
        torch.npu.set_option({"ACL_OP_SELECT_IMPL_MODE": "high_precision"})
    assert torch.npu.get_mm_bmm_format_nd() is True  # torch_npu's default
    try:
        torch.npu.set_option({"MM_BMM_ND_ENABLE": "disable"})
        assert torch.npu.get_mm_bmm_format_nd() is False
        torch.npu.set_mm_bmm_format_nd(True)
        assert torch.npu.get_mm_bmm_format_nd() is True
    finally:
        torch.npu.set_mm_bmm_format_nd(True)


def test_dump_configuration(tmp_path):
    cfg = tmp_path / "acl.json"
    cfg.write_text(json.dumps({"dump": {"dump_path": str(tmp_path), "dump_list": []}}))
    torch.npu.init_dump()
    torch.npu.set_dump(str(cfg))
    assert torch.npu.get_option("mdldumpconfigpath") == str(cfg.resolve())
    torch.npu.finalize_dump()
    assert torch.npu.get_option("mdldumpswitch") == "disable"
    with pytest.raises(AssertionError, match="does not exist"):
        torch.npu.set_dump(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="JSON"):
        torch.npu.set_dump(str(tmp_path / "bad.json"))


def test_compatible_impl_and_cube_math_type():
    assert torch.npu.are_compatible_impl_enabled() is False
    torch.npu.use_compatible_impl(True)
    assert torch.npu.are_compatible_impl_enabled() is True
    torch.npu.use_compatible_impl(False)
    assert torch.npu.matmul.cube_math_type is None
    torch.npu.matmul.cube_math_type = torch.npu.CubeMathType.USE_HF32
    try:
        assert torch.npu.matmul.cube_math_type == torch.npu.CubeMathType.USE_HF32 == 3
        a = torch.randn(32, 32)
        assert torch.allclose((a.npu() @ a.npu()).cpu(), a @ a, rtol=1e-5, atol=1e-5)  # float32 stays float32
    finally:
        torch.npu.matmul.cube_math_type = None
    with pytest.raises(TypeError, match="CubeMathType"):
        torch.npu.matmul.cube_math_type = 3


def test_deterministic_level_drives_torchs_flag():
    from softnpu.npu.ascend import _get_deterministic_level

    assert not torch.are_deterministic_algorithms_enabled()
    try:
        with pytest.warns(UserWarning, match="has been configured to 'True'"):
            torch.npu.set_deterministic_level(2)
        assert torch.are_deterministic_algorithms_enabled() and _get_deterministic_level() == 2
        # index_add_ on the CPU's kernel: deterministic results, equal to the CPU's
        x, idx, src = torch.zeros(4), torch.tensor([0, 1, 0, 3]), torch.arange(4.0)
        assert torch.equal(x.npu().index_add_(0, idx.npu(), src.npu()).cpu(), x.index_add(0, idx, src))
        with pytest.warns(UserWarning, match="has been configured to 'False'"):
            torch.npu.set_deterministic_level(0)
        assert not torch.are_deterministic_algorithms_enabled() and _get_deterministic_level() == 0
        with pytest.raises(RuntimeError, match="0/1/2/3"):
            torch.npu.set_deterministic_level(4)
    finally:
        torch.use_deterministic_algorithms(False)


def test_device_and_stream_limits_in_a_fresh_process():
    # set_device_limit may be called once per process, as on torch_npu.
    out = run_python(textwrap.dedent("""
        import torch, torch_npu
        from softnpu import _C
        p = _C._soc_profile()
        chip = {"cube_core_num": p["ai_cores"], "vector_core_num": p["vector_cores"]}
        assert torch.npu.get_device_limit(0) == chip, torch.npu.get_device_limit(0)
        torch.npu.set_device_limit(0, cube_num=8)
        assert torch.npu.get_device_limit(0) == dict(chip, cube_core_num=8)
        assert torch.npu.get_device_limit(1) == chip
        try:
            torch.npu.set_device_limit(1, vector_num=4)
        except RuntimeError as e:
            assert "already been called" in str(e)
        else:
            raise AssertionError("a second set_device_limit was accepted")
        assert torch.npu.set_device_limit.called
        torch.npu.set_device_limit.called = False  # as torch_npu's tests do to call it again
        try:
            torch.npu.set_device_limit("0")
        except TypeError as e:
            assert "device must be an int" in str(e)
        else:
            raise AssertionError("a str device was accepted")
        assert torch.npu.set_device_limit.called  # a refused call counts, as on torch_npu
        s = torch.npu.Stream()
        assert torch.npu.get_stream_limit(s) == dict(chip, cube_core_num=8)  # the device's
        torch.npu.set_stream_limit(s, 4, 6)
        assert torch.npu.get_stream_limit(s) == {"cube_core_num": 4, "vector_core_num": 6}
        with torch.npu.stream(s):  # work on a limited stream runs as on any other
            y = torch.arange(6.0, device="npu").mul(2)
        s.synchronize()
        assert y.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        torch.npu.reset_stream_limit(s)
        assert torch.npu.get_stream_limit(s) == dict(chip, cube_core_num=8)
        for bad in (lambda: torch.npu.set_stream_limit(s, cube_num=p["ai_cores"] + 1),
                    lambda: torch.npu.set_stream_limit(s, vector_num=0)):
            try:
                bad()
            except RuntimeError:
                pass
            else:
                raise AssertionError("a limit beyond the chip was accepted")
        for bad, exc in ((lambda: torch.npu.get_device_limit(7), AssertionError),
                         (lambda: torch.npu.get_device_limit("0"), TypeError),
                         (lambda: torch.npu.get_stream_limit(torch.cuda.Stream), AssertionError)):
            try:
                bad()
            except exc:
                pass
            else:
                raise AssertionError("bad argument accepted")
        print("ok")
    """))
    assert out.lines[-1] == "ok"


def test_sync_launch_stream_orders_work_like_a_stream():
    s = torch.npu.SyncLaunchStream()
    assert isinstance(s, torch.npu.Stream) and s.device == torch.device("npu", 0)
    s.set_data_preprocess_stream(True)
    a = torch.randn(256, 256)
    x = a.npu()
    s.wait_stream(torch.npu.current_stream())
    with torch.npu.stream(s):
        torch.npu._sleep(100_000_000)  # 0.1 s: the launches below return before the device ran them
        y = x @ x
        assert not s.query()
    torch.npu.current_stream().wait_stream(s)
    assert torch.allclose(y.cpu(), a @ a, rtol=1e-4, atol=1e-4) and s.query()
    assert "SyncLaunchStream" in repr(s)


def test_graph_task_group_update_rewrites_the_group():
    x = torch.arange(4.0, device="npu")
    z = torch.empty(4, device="npu")
    g = torch.npu.NPUGraph()
    s = torch.npu.Stream()
    with torch.npu.graph(g, stream=s):
        y = x * 2
        torch.npu.graph_task_group_begin(s)
        torch.add(y, 1, out=z)
        handle = torch.npu.graph_task_group_end(s)
        w = z * 10
    g.replay()
    assert w.cpu().tolist() == [(2 * v + 1) * 10 for v in range(4)]
    update = torch.npu.Stream()
    with torch.npu.stream(update):
        torch.npu.graph_task_update_begin(update, handle)
        torch.add(y, 5, out=z)  # this step's argument: 5
        torch.npu.graph_task_update_end(update)
    x.copy_(torch.tensor([1.0, 1.0, 1.0, 1.0]))
    g.replay()
    assert w.cpu().tolist() == [70.0] * 4  # (2 * 1 + 5) * 10: the new task, between the others
    assert g._node_count() == 3
    with torch.npu.stream(update):
        torch.npu.graph_task_update_begin(update, handle)
        torch.add(y, 5, out=z)
        torch.add(y, 6, out=z)
        with pytest.raises(RuntimeError, match="same tasks"):
            torch.npu.graph_task_update_end(update)
    g.replay()
    assert w.cpu().tolist() == [70.0] * 4  # a refused update leaves the group as it was
    with pytest.raises(RuntimeError, match="not capturing"):
        torch.npu.graph_task_group_begin(s)
    with pytest.raises(TypeError):
        torch.npu.graph_task_update_begin(update, object())


def test_graph_update_through_op_handlers():
    # torch_npu's auto_dispatch_capture: ops with a registered handler get a task group each, and NPUGraph.update
    # launches them again with the new arguments (vllm-ascend's attention with this step's sequence lengths).
    @torch.npu.register_npu_graph_handler(["mul.Tensor", "mul.out"])
    class MulHandler(torch.npu.NpuGraphOpHandler):
        UPDATE_SPECS = {"mul.out": [("arg", 1, "factor")]}

        @classmethod
        def prepare_capture(cls, func, args, kwargs):  # into a preallocated output, as the update writes there too
            return torch.ops.aten.mul.out, args, dict(kwargs, out=torch.empty_like(args[0]))

    from torch_npu.npu._npugraph_handlers.npugraph_handler import _NPU_GRAPH_OP_HANDLERS

    try:
        x = torch.arange(4.0, device="npu")
        g = torch.npu.NPUGraph()
        with torch.npu.graph(g, auto_dispatch_capture=True):
            y = x * 3.0
            z = y + 1
        g.replay()
        assert z.cpu().tolist() == [1.0, 4.0, 7.0, 10.0]
        g.update([{"factor": 5.0}])
        g.replay()
        assert z.cpu().tolist() == [1.0, 6.0, 11.0, 16.0]
        with pytest.raises(RuntimeError, match="only 2 elements"):
            g.update([{"factor": 1.0}, {"factor": 2.0}])
        plain = torch.npu.NPUGraph()
        with torch.npu.graph(plain):
            x + 1
        with pytest.raises(RuntimeError, match="auto_dispatch_capture=True"):
            plain.update([{}])
    finally:
        _NPU_GRAPH_OP_HANDLERS.pop("mul.Tensor")
        _NPU_GRAPH_OP_HANDLERS.pop("mul.out")


def test_super_kernel_scope_and_graph_op_handlers():
    g = torch.npu.NPUGraph()
    x = torch.ones(3, device="npu")
    with torch.npu.graph(g):
        torch.npu.super_kernel_scope_begin("block")
        y = x + 1
        torch.npu.super_kernel_scope_end("block")
    g.replay()
    assert y.cpu().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="non-empty"):
        torch.npu.super_kernel_scope_begin("  ")

    @torch.npu.register_npu_graph_handler(["my_op", "my_op.default"])
    class Handler(torch.npu.NpuGraphOpHandler):
        UPDATE_SPECS = {"my_op.default": [("arg", 1, "seq_lens"), ("kwarg", "scale", "scale")]}

    from torch_npu.npu._npugraph_handlers.npugraph_handler import _NPU_GRAPH_OP_HANDLERS

    assert _NPU_GRAPH_OP_HANDLERS["my_op"] is Handler

    class Record:
        op_cache_entry = types.SimpleNamespace(__name__="my_op.default")
        args, kwargs = ["q", [1, 2]], {"scale": 1.0}

    Handler.update_args(Record, {"seq_lens": [3, 4], "scale": 0.5, "other": 1})
    assert Record.args == ["q", [3, 4]] and Record.kwargs == {"scale": 0.5}


def test_empty_virt_addr_cache_returns_cached_memory():
    t = torch.empty(64 << 20, dtype=torch.uint8, device="npu")
    del t
    assert torch.npu.memory_reserved() >= 64 << 20
    torch.npu.empty_virt_addr_cache()
    assert torch.npu.memory_reserved() < 64 << 20


def test_calls_a_software_npu_cannot_serve_raise():
    with pytest.raises(RuntimeError, match="PMCC"):
        torch.npu.obfuscation_initialize(1024, 0, 1)


def test_aclnn_allow_hf32_is_the_convolutions_switch():
    assert torch.npu.aclnn.allow_hf32 is True
    with torch.npu.aclnn.flags(allow_hf32=False):
        assert torch.npu.conv.allow_hf32 is False and torch.npu.aclnn.allow_hf32 is False
    assert torch.npu.conv.allow_hf32 is True
    with pytest.warns(UserWarning):
        assert torch.npu.aclnn.version() is None


def test_storage_use_count_and_weak_ref_tensor():
    t = torch.arange(6.0, device="npu")
    count = torch_npu._C._storage_Use_Count(t.untyped_storage()._cdata)
    v = t.view(2, 3)
    assert torch_npu._C._storage_Use_Count(v.untyped_storage()._cdata) == count + 1
    del v
    w = torch_npu._C._weak_ref_tensor(t[2:])
    assert torch_npu._C._storage_Use_Count(t.untyped_storage()._cdata) == count  # w does not hold t's storage
    assert w.data_ptr() == t[2:].data_ptr() and w.shape == (4,) and w.device == t.device
    t.add_(1)
    assert w.cpu().tolist() == [3.0, 4.0, 5.0, 6.0]  # the same memory
    w.zero_()
    assert t.cpu().tolist() == [1.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    assert torch_npu._C._weak_ref_tensor(3) == 3


def test_empty_strided_npu_and_change_data_ptr():
    t = torch_npu._C._empty_strided_npu((3, 4), (8, 1), torch.float16)
    assert t.shape == (3, 4) and t.stride() == (8, 1) and t.dtype == torch.float16 and t.device.type == "npu"
    reference = torch.empty_strided((3, 4), (8, 1), dtype=torch.float16)
    assert t.untyped_storage().nbytes() == reference.untyped_storage().nbytes()
    buffer = torch.arange(10.0, device="npu")
    dst = torch.zeros(2, 2, device="npu")
    assert torch_npu.npu_change_data_ptr(dst, buffer, 4) == 0
    assert dst.cpu().tolist() == [[4.0, 5.0], [6.0, 7.0]] and torch_npu.get_storage_size(dst) == 4
    dst.mul_(10)  # writes go to the buffer
    assert buffer.cpu().tolist()[3:9] == [3.0, 40.0, 50.0, 60.0, 70.0, 8.0]
    with pytest.raises(RuntimeError, match="offsets overflow"):
        torch_npu.npu_change_data_ptr(dst, buffer, 8)
    # The storage itself is re-pointed, as torch_npu's: a view of dst made before follows it.
    other = torch.zeros(4, device="npu")
    view = other[1:]
    torch_npu.npu_change_data_ptr(other, buffer, 0)
    assert view.cpu().tolist() == [1.0, 2.0, 3.0]
    # A tensor over a storage shrunk below its size (torch_npu's combined-tensor recipe): the storage's 2 elements
    # are re-pointed, the copy writes the whole tensor from there.
    x = torch.arange(4.0, device="npu")
    values = x.clone()
    x.untyped_storage().resize_(2 * x.element_size())
    combined = torch.zeros(6, device="npu")
    torch_npu.npu_change_data_ptr(x, combined, 2)
    x.copy_(values)
    assert torch_npu.get_storage_size(x) == 2 and combined.cpu().tolist() == [0.0, 0.0, 0.0, 1.0, 2.0, 3.0]


def test_dtype_numbers_as_torch_npu_exports_them():
    assert torch_npu.hifloat8 == torch_npu._C._cd.DType.hifloat8 == 256 + 34
    assert torch_npu.float8_e8m0fnu == 256 + 37 and torch_npu.float8_e5m2 == 256 + 35
    assert torch_npu._C._cd.DType.bfloat16 == 256 + 27


def test_npu_defaults_to_hccl():
    assert torch.distributed.Backend.default_device_backend_map["npu"] == "hccl"


def test_flops_counter_counts_matrix_ops_on_npu():
    from torch_npu.utils.flops_count import FlopsCounter

    with pytest.warns(FutureWarning):
        FlopsCounter()
    counter = torch_npu.utils.FlopsCounter()
    a = torch.randn(8, 16, device="npu", requires_grad=True)
    b = torch.randn(16, 4, device="npu")
    counter.start()
    y = a @ b  # 2*8*16*4
    assert counter.get_flops() == [1024, 1024]
    torch.randn(8, 16) @ torch.randn(16, 4)  # the CPU's: not counted
    counter.pause()
    a @ b
    assert counter.get_flops() == [1024, 2048]
    counter.resume()
    y.sum().backward()  # grad of a: 8x4 @ 4x16
    assert counter.get_flops() == [2048, 3072]
    q = torch.randn(1, 2, 8, 16, device="npu")
    before = counter.get_flops()[0]
    torch_npu.npu_fusion_attention(q, q, q, 2, "BNSD", scale=0.25)
    assert counter.get_flops()[0] - before == 4 * 2 * 8 * 8 * 16  # Q K^T and P V
    counter.stop()
    assert counter.get_flops() == [0, 0]
    a @ b
    assert counter.get_flops() == [0, 0]


def test_hccl_options_kept_by_the_group():
    out = run_python(textwrap.dedent("""
        import os, torch, torch_npu, torch.distributed as dist
        Options = torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options
        o = Options()
        assert o.hccl_config == {} and isinstance(o, torch._C._distributed_c10d.Backend.Options)
        o.hccl_config = {"hccl_buffer_size": 300, "group_name": "custom"}
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000))
        dist.init_process_group("hccl", rank=0, world_size=1, pg_options=o)
        o.hccl_config = {"hccl_buffer_size": 200}  # later changes do not reach the group
        pg = dist.distributed_c10d._get_default_group()._get_backend(torch.device("npu"))
        assert isinstance(pg, torch_npu._C._distributed_c10d.ProcessGroupHCCL)
        assert pg.options.hccl_config == {"hccl_buffer_size": 300, "group_name": "custom"}, pg.options.hccl_config
        t = torch.ones(3, device="npu")
        dist.all_reduce(t)
        sub = dist.new_group([0], backend="hccl", pg_options=o)
        dist.all_reduce(t, group=sub)
        assert sub._get_backend(torch.device("npu")).options.hccl_config == {"hccl_buffer_size": 200}
        try:
            o.hccl_config = {"hccl_buffer_size": 1.5}
        except TypeError:
            pass
        else:
            raise AssertionError("a float HCCL setting was accepted")
        assert t.cpu().tolist() == [1.0, 1.0, 1.0]
        dist.destroy_process_group()
        print("ok")
    """))
    assert out.lines[-1] == "ok"
