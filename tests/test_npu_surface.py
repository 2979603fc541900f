"""The torch.npu surface beyond devices, streams and memory, against what torch.cuda / torch_npu promise: the
legacy tensor and storage types, peer access, the precision switches, the autocast getters and setters, the
Ascend-specific calls; and the share of torch_npu's CUDA-equivalent torch.npu names softnpu has."""

import pytest
import torch
import torch_npu

# torch_npu's public torch.npu names that have a torch.cuda equivalent (issue 11: 99 names).
CUDA_EQUIVALENT_NAMES = """
Event Stream StreamContext amp current_device current_stream default_generators default_stream device device_count
device_of empty_cache get_device_capability get_device_name get_device_properties get_rng_state get_rng_state_all
init initial_seed is_available is_bf16_supported is_current_stream_capturing is_initialized manual_seed
manual_seed_all max_memory_allocated max_memory_reserved mem_get_info memory_allocated memory_reserved
memory_snapshot memory_stats memory_summary reset_accumulated_memory_stats reset_max_memory_allocated
reset_peak_memory_stats seed seed_all set_device set_rng_state set_rng_state_all set_stream stream synchronize
utilization
MemPool use_mem_pool caching_allocator_alloc caching_allocator_delete get_allocator_backend NPUPluggableAllocator
change_current_allocator set_per_process_memory_fraction get_per_process_memory_fraction memory_stats_as_nested_dict
memory_cached max_memory_cached reset_max_memory_cached host_empty_cache host_memory_stats
host_memory_stats_as_nested_dict reset_accumulated_host_memory_stats reset_peak_host_memory_stats NPUGraph graph
graph_pool_handle make_graphed_callables set_sync_debug_mode get_sync_debug_mode ExternalEvent ipc_collect
can_device_access_peer current_blas_handle matmul conv is_autocast_enabled set_autocast_enabled get_autocast_dtype
set_autocast_dtype
DoubleTensor FloatTensor HalfTensor BFloat16Tensor LongTensor IntTensor ShortTensor CharTensor ByteTensor BoolTensor
DoubleStorage FloatStorage HalfStorage BFloat16Storage LongStorage IntStorage ShortStorage CharStorage ByteStorage
BoolStorage
""".split()


def test_share_of_cuda_equivalent_names():
    assert len(CUDA_EQUIVALENT_NAMES) == len(set(CUDA_EQUIVALENT_NAMES)) == 99
    present = {n for n in CUDA_EQUIVALENT_NAMES if hasattr(torch.npu, n)}
    assert present == set(CUDA_EQUIVALENT_NAMES)  # 99 of 99
    assert present <= set(torch.npu.__all__)
    assert torch_npu.npu is torch.npu


@pytest.mark.parametrize("name,dtype", [("FloatTensor", torch.float32), ("HalfTensor", torch.float16),
                                        ("BFloat16Tensor", torch.bfloat16), ("LongTensor", torch.int64),
                                        ("BoolTensor", torch.bool), ("ByteTensor", torch.uint8)])
def test_legacy_tensor_types(name, dtype):
    cls = getattr(torch.npu, name)
    t = cls(2, 3)
    assert t.device == torch.device("npu", 0) and t.dtype == dtype and t.shape == (2, 3)
    assert isinstance(t, cls) and isinstance(torch.zeros(4, dtype=dtype, device="npu"), cls)
    assert not isinstance(torch.zeros(4, dtype=dtype), cls)  # a CPU tensor is not an npu type
    data = cls([1, 0, 1]).cpu()
    assert torch.equal(data, torch.tensor([1, 0, 1], dtype=dtype))
    assert cls(torch.Size([5])).shape == (5,) and cls().shape == (0,)
    assert cls(3, device="npu:1").device == torch.device("npu", 1)


def test_legacy_types_distinguish_dtypes():
    assert not isinstance(torch.npu.FloatTensor(2), torch.npu.HalfTensor)
    assert not isinstance(torch.npu.LongTensor(2), torch.npu.IntTensor)
    with pytest.raises(TypeError):
        torch.npu.FloatTensor(2, "3")


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_legacy_storage_types():
    s = torch.npu.FloatStorage(10)
    assert s.device.type == "npu" and s.dtype == torch.float32 and len(s) == 10
    assert isinstance(s, torch.npu.FloatStorage) and not isinstance(s, torch.npu.HalfStorage)
    assert isinstance(torch.ones(3, device="npu").storage(), torch.npu.FloatStorage)
    assert not isinstance(torch.ones(3).storage(), torch.npu.FloatStorage)


def test_peer_access_ipc_and_blas_handle():
    assert torch.npu.can_device_access_peer(0, 1) and torch.npu.can_device_access_peer("npu:1", 0)
    assert not torch.npu.can_device_access_peer(0, 0)
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.npu.can_device_access_peer(7, 0)
    with pytest.raises(AssertionError, match="Invalid peer device id"):
        torch.npu.can_device_access_peer(0, -1)
    torch.npu.ipc_collect()
    with pytest.warns(UserWarning, match="NPU does not use blas handle"):
        assert torch.npu.current_blas_handle() is None  # torch_npu's answer


def test_precision_switches_are_recorded():
    assert torch.npu.matmul.allow_hf32 is False and torch.npu.conv.allow_hf32 is True
    a = torch.randn(64, 64)
    expected = (a @ a)
    torch.npu.matmul.allow_hf32 = True
    try:
        assert torch.npu.matmul.allow_hf32 is True
        # Documented: no effect on numerics here (float32 stays float32).
        assert torch.allclose((a.npu() @ a.npu()).cpu(), expected, rtol=1e-5, atol=1e-5)
    finally:
        torch.npu.matmul.allow_hf32 = False
    with pytest.raises(TypeError):
        torch.npu.conv.allow_hf32 = "yes"
    with pytest.raises(AttributeError):
        torch.npu.matmul.allow_fp64 = True


def test_autocast_getters_and_setters():
    assert torch.npu.is_autocast_enabled() is False
    assert torch.npu.get_autocast_dtype() == torch.float16
    with torch.autocast("npu", dtype=torch.bfloat16):
        assert torch.npu.is_autocast_enabled() and torch.npu.get_autocast_dtype() == torch.bfloat16
    torch.npu.set_autocast_enabled(True)
    torch.npu.set_autocast_dtype(torch.bfloat16)
    try:
        a = torch.randn(8, 8, device="npu")
        assert (a @ a).dtype == torch.bfloat16
    finally:
        torch.npu.set_autocast_enabled(False)
        torch.npu.set_autocast_dtype(torch.float16)
    assert (a @ a).dtype == torch.float32


def test_ascend_specific_calls():
    torch.npu.set_compile_mode(jit_compile=False)
    assert torch.npu.is_jit_compile_false()
    torch.npu.set_compile_mode(jit_compile=True)
    assert not torch.npu.is_jit_compile_false()
    torch.npu.set_compile_mode(jit_compile=False)
    with pytest.raises(TypeError):
        torch.npu.set_compile_mode(jit_compile="no")
    torch.npu.set_option({"ACL_OP_SELECT_IMPL_MODE": "high_performance"})
    assert torch.npu.get_option("ACL_OP_SELECT_IMPL_MODE") == "high_performance"
    with pytest.raises(TypeError, match="dict"):
        torch.npu.set_option("ACL_OP_SELECT_IMPL_MODE")
    assert torch.npu.config.allow_internal_format is False
    torch_npu.npu.config.allow_internal_format = True
    assert torch.npu.config.allow_internal_format is True
    torch.npu.config.allow_internal_format = False
    torch_npu.npu.set_aoe("/tmp/aoe")
    with pytest.raises(ValueError):
        torch.npu.set_aoe("")
    torch.npu.set_op_timeout_ms(1000)
    with pytest.raises(OverflowError, match="can't convert negative value to unsigned int"):
        torch.npu.set_op_timeout_ms(-1)
    with pytest.raises(ValueError, match="Overflow when unpacking"):
        torch.npu.set_op_timeout_ms(2**32)


def test_stress_detect_runs_its_self_test():
    assert torch.npu.stress_detect() == 0


def test_overflow_flag_is_set_by_half_precision_kernels():
    torch.npu.clear_npu_overflow_flag()
    assert torch.npu.get_npu_overflow_flag() is False
    big = torch.full((16,), 60000.0, dtype=torch.float16, device="npu")
    ok = big / 4
    assert torch.npu.get_npu_overflow_flag() is False  # finite results
    big * 2  # 120000 overflows float16
    assert torch.npu.get_npu_overflow_flag() is True
    torch.npu.clear_npu_overflow_flag()
    assert torch.npu.get_npu_overflow_flag() is False
    x = torch.full((4,), 60000.0, dtype=torch.bfloat16, device="npu")
    x.mul_(float("inf"))  # an in-place result counts too
    assert torch.npu.get_npu_overflow_flag() is True
    torch.npu.clear_npu_overflow_flag()
    torch.ones(4, device="npu") * float("inf")  # float32 is not checked: Ascend's flag is about float16
    assert torch.npu.get_npu_overflow_flag() is False
    assert ok.cpu().tolist() == [15000.0] * 16


def test_external_event_orders_streams():
    s1, s2 = torch.npu.Stream(), torch.npu.Stream()
    ev = torch.npu.ExternalEvent()
    with torch.npu.stream(s1):
        torch.npu._sleep(200_000_000)
        a = torch.full((1000,), 2.0, device="npu")
        ev.record(s1)
    ev.wait(s2)
    with torch.npu.stream(s2):
        b = a * 3
    s2.synchronize()
    assert ev.query() and b.cpu().eq(6).all()
    ev.reset(s1)
    ev.wait(s2)  # after a reset, waiting does not block
    s2.synchronize()


def test_backends_attention_switches_choose_npus_sdpa_kernel():
    from torch.profiler import profile

    q = torch.randn(1, 2, 8, 4, device="npu")
    assert torch.npu.backends.flash_sdp_enabled()
    try:
        for flash in (False, True):
            torch.npu.backends.enable_flash_sdp(flash)
            assert torch.npu.backends.flash_sdp_enabled() == flash
            with profile() as p:
                torch.nn.functional.scaled_dot_product_attention(q, q, q).cpu()
            ran = {e.key for e in p.key_averages()}
            assert ("aten::_scaled_dot_product_flash_attention_for_cpu" in ran) == flash
            assert ("aten::_scaled_dot_product_attention_math" in ran) != flash
    finally:
        torch.npu.backends.enable_flash_sdp(True)
    assert torch.npu.backends.preferred_linalg_library() is not None


def test_deterministic_region_covers_forward_and_backward():
    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            seen.append(("forward", torch.are_deterministic_algorithms_enabled()))
            return x * 2

        @staticmethod
        def backward(ctx, g):
            seen.append(("backward", torch.are_deterministic_algorithms_enabled()))
            return g * 2

    x = torch.ones(3, device="npu", requires_grad=True)
    y = torch.npu.enable_deterministic_with_backward(x)
    y = Probe.apply(y)
    y = torch.npu.disable_deterministic_with_backward(y)
    assert not torch.are_deterministic_algorithms_enabled()
    seen.append(("after forward", torch.are_deterministic_algorithms_enabled()))
    y.sum().backward()
    assert seen == [("forward", True), ("after forward", False), ("backward", True)]
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.equal(x.grad.cpu(), torch.full((3,), 2.0))


def test_sleep_counts_cycles_of_the_device_clock():
    # As torch.cuda._sleep: an int number of cycles; the clock is the devices' clock_rate (kHz, as CUDA's).
    clock_khz = torch.npu.get_device_properties(0).clock_rate
    assert clock_khz == 1_000_000
    cycles = clock_khz * 1000 // 5  # 0.2 s
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    torch.npu._sleep(cycles)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 1e3 * cycles / (clock_khz * 1e3) * 0.95  # milliseconds
    with pytest.raises(TypeError):
        torch.npu._sleep(0.2)  # seconds are not cycles
