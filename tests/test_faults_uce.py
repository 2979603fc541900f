"""A UCE fails the kernels that touch its range, and only those (issue 37).

On Ascend a kernel touching an HBM page with an uncorrectable error fails with ACL_ERROR_RT_DEVICE_MEM_ERROR (507053),
which torch_npu raises as RuntimeError "UCE ERROR" at the next synchronizing call; check_uce_in_memory answers 0 (no
UCE), 1 (memory the caching allocator does not hold), 2 (memory it only cached: emptying the cache, which it does,
gives it back) or 3 (memory of live tensors); restart_device repairs the memory (aclrtMemUceRepair) and the program
restores what was hit, e.g. by copying from a replica. Here the op path checks every kernel's operands against the
poisoned ranges, so a step that does not read the poisoned parameter trains on."""
import gc

import pytest
import torch
import torch_npu  # noqa: F401


@pytest.fixture(autouse=True)
def repaired_device():
    gc.collect()
    torch.npu.synchronize()
    yield
    torch.npu._fault.clear()
    torch.npu.restart_device(0)  # repairs every UCE range and drops the errors the streams kept
    torch.npu._recovery.set_npu_tensor_unsafe_check_flag(False)
    torch.npu.synchronize()


def _two_parameters():
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(256, 64, device="npu"))
    b = torch.nn.Parameter(torch.randn(256, 64, device="npu"))
    x = torch.randn(8, 64, device="npu")
    torch.npu.synchronize()
    return a, b, x


def test_a_step_reading_only_the_other_parameter_runs_and_one_reading_the_poisoned_one_raises():
    a, b, x = _two_parameters()
    replica = a.detach().cpu()
    torch.npu._fault.inject("uce", tensor=a[100:110])  # ten rows of a's memory go bad
    # A step reading b only: forward, backward and an update, all on npu.
    loss = (x @ b.t()).square().mean()
    loss.backward()
    with torch.no_grad():
        b -= 0.1 * b.grad
    torch.npu.synchronize()
    assert torch.isfinite(loss).item()
    # Rows of a outside the range read fine: a kernel fails by the bytes it touches, not by the tensor.
    torch.testing.assert_close(a[:100].sum().cpu(), replica[:100].sum())
    # A step reading a fails at the next synchronizing call with torch_npu's text, the op and the operand hit.
    y = x @ a.t()
    with pytest.raises(RuntimeError) as info:
        torch.npu.synchronize()
    text = str(info.value)
    assert text.startswith("UCE ERROR"), text
    assert "aten::mm" in text and "argument 'mat2': Float[64, 256] at" in text and "(ACL error 507053" in text, text
    del y
    # What recovery code asks: torch_npu's answer 3 (live memory), the range, and the tensors on it.
    assert torch.npu.check_uce_in_memory(0) == 3
    ranges = torch.npu._get_uce_addr()
    assert ranges == [{"ptr": a[100:].data_ptr(), "size": 10 * 64 * 4}], ranges
    assert torch.npu._fault.tensors_hit([b, a, x]) == [1]
    # The synchronizing path (a data-dependent op) raises at the call itself.
    with pytest.raises(RuntimeError, match="^UCE ERROR"):
        torch.nonzero(a)


def test_restart_device_and_a_copy_from_the_replica_restore_the_parameter():
    """MindSpeed-LLM's flow on torch_npu: stop_device, check_uce_in_memory, restart_device (which repairs the memory),
    then the parameter is rebuilt from a replica; the next step reads it as any other."""
    a, b, x = _two_parameters()
    replica = a.detach().clone()  # on the device, as a healthy rank's copy would arrive
    torch.npu._fault.inject("uce", tensor=a)
    _ = (x @ a.t()).sum()
    with pytest.raises(RuntimeError, match="^UCE ERROR"):
        torch.npu.synchronize()
    assert torch.npu.stop_device(0) == 0
    assert torch.npu.check_uce_in_memory(0) == 3
    torch.npu.restart_device(0)
    assert torch.npu.check_uce_in_memory(0) == 0 and torch.npu._get_uce_addr() == []
    with torch.no_grad():
        a.copy_(replica)
    torch.npu._recovery.update_npu_tensor_to_safe(a)
    out = (x @ a.t()).sum()
    torch.testing.assert_close(out.cpu(), (x.cpu() @ replica.cpu().t()).sum())


def test_a_uce_in_memory_only_cached_is_temporary_and_emptying_the_cache_frees_it():
    t = torch.empty(4 << 20, device="npu")  # a segment of its own
    torch.npu._fault.inject("uce", tensor=t)
    del t
    reserved = torch.npu.memory_reserved(0)
    assert torch.npu.check_uce_in_memory(0) == 2
    assert torch.npu.memory_reserved(0) < reserved  # as torch_npu's: the cache was emptied
    fresh = torch.ones(16, device="npu")  # new work runs
    assert fresh.sum().item() == 16


def test_a_uce_outside_the_caching_allocator_is_unrecoverable_memory():
    p = torch.npu.caching_allocator_alloc(1 << 20)  # raw memory of the caching allocator: answer 3
    torch.npu._fault.inject("uce", ptr=p, size=4096)
    assert torch.npu.check_uce_in_memory(0) == 3
    torch.npu.caching_allocator_delete(p)
    torch.npu.empty_cache()  # its segment went back to the device: no longer memory torch_npu holds
    assert torch.npu.check_uce_in_memory(0) == 1
