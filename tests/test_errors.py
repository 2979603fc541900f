"""Errors users meet: tensors on different devices, devices that do not exist, kernel errors (reported
asynchronously, once, with the op's name and the ASCEND_LAUNCH_BLOCKING hint) and the device working after them."""

import re

import pytest
import torch
from conftest import run_python


# ------------------------------------------------------------------------------------------------ devices


def test_npu_and_cpu_tensor_in_one_op_is_an_error():
    x = torch.ones(3, device="npu")
    for op in (lambda: x + torch.ones(3), lambda: torch.ones(3) + x, lambda: x.add_(torch.ones(3)),
               lambda: torch.matmul(torch.ones(3, 3, device="npu"), torch.ones(3, 3)),
               lambda: torch.cat([x, torch.ones(3)])):
        with pytest.raises(RuntimeError, match=r"(?s)same device.*(npu:0.*cpu|cpu.*npu:0)"):
            op()


def test_zero_dim_cpu_tensors_mix_with_npu_tensors():
    # As with CUDA: a 0-dim CPU tensor is a scalar and may join an npu op.
    x = torch.arange(4.0, device="npu")
    scale = torch.tensor(2.5)
    out = x * scale
    assert out.device == torch.device("npu:0")
    assert out.cpu().tolist() == [0.0, 2.5, 5.0, 7.5]
    assert torch.where(x > 1, x, torch.tensor(-1.0)).cpu().tolist() == [-1.0, -1.0, 2.0, 3.0]


def test_tensors_on_two_npus_in_one_op_is_an_error():
    a = torch.ones(3, device="npu:0")
    b = torch.ones(3, device="npu:1")
    with pytest.raises(RuntimeError, match=r"(?s)same device.*npu:[01].*npu:[01]"):
        a + b
    with pytest.raises(RuntimeError, match=r"(?s)same device"):
        torch.matmul(a.view(3, 1), b.view(1, 3))


def test_using_a_missing_device_is_a_clear_error():
    missing = torch.device("npu:5")  # naming it is fine, as torch.device("cuda:5") is
    for use in (lambda: torch.ones(2, device=missing), lambda: torch.ones(2).to(missing),
                lambda: torch.ones(2).npu(5), lambda: torch.npu.set_device(5),
                lambda: torch.npu.Stream(device=5), lambda: torch.npu.memory_allocated(5)):
        with pytest.raises(RuntimeError, match=r"(?i)invalid device.*npu:5|npu:5.*invalid"):
            use()
    assert torch.ones(2, device="npu").sum().item() == 2.0  # and the devices are fine


# ------------------------------------------------------------------------------------------------ kernel errors


def _bad_index():
    x = torch.arange(10, device="npu")
    idx = torch.tensor([1, 100], device="npu")  # 100 is out of range: only the kernel can tell
    return x[idx]


def test_kernel_error_is_raised_at_the_next_synchronize_once():
    _bad_index()  # returns: the kernel has not run yet
    with pytest.raises(IndexError) as info:
        torch.npu.synchronize()
    message = str(info.value)
    assert "out of bounds" in message
    assert "aten::index" in message  # which op failed
    assert "ASCEND_LAUNCH_BLOCKING=1" in message  # how to find where
    torch.npu.synchronize()  # reported once
    # The device works after it.
    x = torch.arange(10.0, device="npu")
    assert (x + x).cpu().tolist() == [2.0 * i for i in range(10)]


def test_kernel_error_is_raised_by_cpu_copy_and_item():
    y = _bad_index()
    with pytest.raises(IndexError, match="ASCEND_LAUNCH_BLOCKING"):
        y.cpu()
    z = _bad_index()
    with pytest.raises(IndexError, match="aten::index"):
        z.sum().item()
    assert torch.ones(3, device="npu").sum().item() == 3.0


def test_kernel_error_on_a_side_stream_is_raised_by_its_synchronizing_calls():
    s = torch.npu.Stream()
    with torch.npu.stream(s):
        _bad_index()
        event = s.record_event()
    with pytest.raises(IndexError):
        event.synchronize()
    s.synchronize()  # already reported
    with torch.npu.stream(s):
        _bad_index()
    with pytest.raises(IndexError):
        s.synchronize()
    with torch.npu.stream(s):
        ok = torch.ones(3, device="npu") + torch.ones(3, device="npu")
    s.synchronize()
    assert ok.cpu().tolist() == [2.0, 2.0, 2.0]


def test_launch_blocking_raises_at_the_call():
    result = run_python(
        """
        import time, traceback, torch, torch_npu
        x = torch.arange(10, device="npu")
        idx = torch.tensor([1, 100], device="npu")
        try:
            y = x[idx]
        except IndexError as e:
            print("raised at the call", "aten::index" in str(e))
        torch.npu.synchronize()  # nothing left to report
        print((x + x).cpu().tolist() == [2 * i for i in range(10)])
        # Every launch completes before it returns.
        torch.npu._sleep(200_000_000)
        print(torch.npu.current_stream().query())
        """,
        env={"ASCEND_LAUNCH_BLOCKING": 1},
    )
    assert result.lines == ["raised at the call True", "True", "True"]


# ------------------------------------------------------------------------------------------------ error codes

# torch_npu's error line, as its exception handler matches it (torch_npu/utils/_error_code.py).
ERROR_LINE = r"\[ERROR\] [0-9\-\:]* \(PID:\d*, Device:\-?\d*, RankID:\-?\d*\) ERR"


def test_errors_carry_torch_npu_error_codes():
    import torch_npu
    from torch_npu.utils.error_code import ErrCode, ops_error, pta_error

    assert re.search(ERROR_LINE + r"00003 PTA invalid value$", pta_error(ErrCode.VALUE))
    assert re.search(ERROR_LINE + r"01007 OPS feature not supported$", ops_error(ErrCode.NOT_SUPPORT))
    # From torch.npu's Python, the backend's C++, and an op's argument check.
    with pytest.raises(ValueError, match=r"(?s)Expected a npu device, but got: cpu\n" + ERROR_LINE + "00003 PTA"):
        torch.npu.set_device("cpu")
    with pytest.raises(RuntimeError, match=r"(?s)Invalid device index npu:9.*\n" + ERROR_LINE + "00001 PTA"):
        torch.npu.set_device(9)
    with pytest.raises(RuntimeError, match=r"(?s)unknown acl_format 7 .*\n" + ERROR_LINE + "01001 OPS"):
        torch_npu.npu_format_cast(torch.ones(2, device="npu"), 7)
    # An ATen kernel's argument check at the call: its message and Python type, with torch_npu's OPS code.
    one = torch.tensor(1, device="npu")
    with pytest.raises(RuntimeError, match=r"(?s)div expected rounding_mode .*'test'\n" + ERROR_LINE + "01001 OPS"):
        torch.div(one, one, rounding_mode="test")
    with pytest.raises(IndexError, match=r"(?s)Dimension out of range.*\n" + ERROR_LINE + "01001 OPS invalid param"):
        torch.zeros(3, device="npu").sum(dim=1)


def test_messages_say_a_npu_device_as_torch_npu_does():
    with pytest.raises(ValueError, match="Expected a npu device, but got: cpu"):
        torch.npu.synchronize("cpu")
