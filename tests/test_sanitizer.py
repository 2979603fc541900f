"""torch.npu._sanitizer (TORCH_NPU_SANITIZER=1), as torch.cuda._sanitizer: a data race between two streams is reported
with both accesses' ops and stack traces; correctly ordered code is silent. Each case runs in a fresh process, since
the sanitizer's mode is global to the program once enabled."""

import pytest

from conftest import run_many

SANITIZED = {"TORCH_NPU_SANITIZER": "1"}

# Defines a planted race's two halves as functions, so their names mark each access's stack trace; `order` is what
# each case runs between them.
PROLOGUE = """
import sys
import torch, torch_npu
from torch_npu.npu import _sanitizer

s1, s2 = torch.npu.Stream(), torch.npu.Stream()
a = torch.arange(4096, dtype=torch.float32, device="npu")
torch.npu.synchronize()

def write_on_s1():
    with torch.npu.stream(s1):
        return torch.mul(a, 2)

def read_on_s2(b):
    with torch.npu.stream(s2):
        return torch.add(b, 1)

def run(order, check=True):
    b = write_on_s1()
    order(b)
    try:
        c = read_on_s2(b)
    except _sanitizer.NPUSanitizerErrors as e:
        print("RACE", len(e.errors))
        return
    torch.npu.synchronize()
    assert not check or torch.equal(c.cpu(), torch.arange(4096, dtype=torch.float32) * 2 + 1)
    print("SILENT")
"""

ORDERS = {
    "none": "lambda b: None",
    "wait_stream": "lambda b: s2.wait_stream(s1)",
    "event": "lambda b: s2.wait_event(s1.record_event())",
    "torch_event": "lambda b: torch.Event(device='npu').record(s1) or None",
    "device_synchronize": "lambda b: torch.npu.synchronize()",
    "stream_synchronize": "lambda b: s1.synchronize()",
    "event_synchronize": "lambda b: s1.record_event().synchronize()",
}


@pytest.fixture(scope="module")
def orders():
    jobs = [(PROLOGUE + f"run({code})\n", SANITIZED) for code in ORDERS.values()]
    return dict(zip(ORDERS, run_many(jobs)))


def test_planted_race_is_reported_with_both_ops_streams_and_stacks(orders):
    result = orders["none"]
    assert result.lines == ["RACE 1"], result.describe()
    report = result.stderr
    assert "NPU sanitizer detected a possible data race on tensor with data pointer" in report
    current, previous = report.split("Previous access by stream")
    # The second access: the read on s2, in read_on_s2; the first: the write on s1, in write_on_s1.
    assert "aten::add.Tensor" in current and "reading from argument(s) self" in current
    assert "read_on_s2" in current and "write_on_s1" not in current
    assert "aten::mul.Tensor" in previous and "writing to the output" in previous
    assert "write_on_s1" in previous and "read_on_s2" not in previous
    assert "Tensor was allocated with stack trace" in previous


def test_planted_race_names_the_two_streams(orders):
    report = orders["none"].stderr
    current, previous = report.split("Previous access by stream")
    ids = [line for line in report.splitlines() if "access by stream" in line.lower()]
    assert len(ids) == 2 and ids[0] != ids[1], ids
    assert "npu:0 stream id" in current and "npu:0 stream id" in previous


@pytest.mark.parametrize("order", [o for o in ORDERS if o not in ("none", "torch_event")])
def test_ordered_streams_are_silent(orders, order):
    result = orders[order]
    assert result.lines == ["SILENT"], result.describe()
    assert "data race" not in result.stderr


def test_recording_an_event_without_waiting_orders_nothing(orders):
    result = orders["torch_event"]
    assert result.lines == ["RACE 1"], result.describe()


CASES = {
    # Enabled by the call instead of the variable.
    "enable_call": ("""
_sanitizer.enable_npu_sanitizer()
run(lambda b: None)
""", None),
    # Write after read: a read on s1, then an overwrite on s2.
    "write_after_read": ("""
with torch.npu.stream(s1):
    torch.sum(a)
with torch.npu.stream(s2):
    try:
        a.zero_()
        print("SILENT")
    except _sanitizer.NPUSanitizerErrors as e:
        print("RACE", len(e.errors))
""", SANITIZED),
    # A factory's output is written by its kernel (new_zeros on s1): an unordered read on s2 races with it.
    "factory_write": ("""
s1.wait_stream(torch.npu.current_stream())
with torch.npu.stream(s1):
    z = a.new_zeros(4096)
with torch.npu.stream(s2):
    try:
        z + 1
        print("SILENT")
    except _sanitizer.NPUSanitizerErrors as e:
        print("RACE", len(e.errors))
""", SANITIZED),
    # Two reads from different streams do not race.
    "two_reads": ("""
with torch.npu.stream(s1):
    x = torch.sum(a)
with torch.npu.stream(s2):
    y = torch.sum(a)
torch.npu.synchronize()
print("SILENT" if x.item() == y.item() else "WRONG")
""", SANITIZED),
    # record_stream: the block goes back to the allocator only once s2 is done; the new tensor in it is fresh memory.
    "record_stream_reuse": ("""
for _ in range(20):
    with torch.npu.stream(s1):
        t = torch.ones(1 << 16, device="npu")
    s2.wait_stream(s1)
    with torch.npu.stream(s2):
        t.mul_(3)
        t.record_stream(s2)
    del t
    with torch.npu.stream(s1):
        u = torch.zeros(1 << 16, device="npu")
        u.add_(1)
torch.npu.synchronize()
print("SILENT")
""", SANITIZED),
    # A copy between devices is ordered with both devices' streams.
    "cross_device_copy": ("""
x = torch.ones(1024, device="npu:0")
y = x.to("npu:1")
y.mul_(2)
x.add_(1)
z = y.to("npu:0")
print("SILENT" if torch.equal(z.cpu(), torch.full((1024,), 2.0)) else "WRONG")
""", SANITIZED),
    # A copy to the host synchronizes the host with the stream; work on another stream afterwards is ordered.
    "item_then_other_stream": ("""
b = write_on_s1()
with torch.npu.stream(s1):
    b.sum().item()
c = read_on_s2(b)
print("SILENT")
""", SANITIZED),
    # The backward pass, on the streams of the forward ops.
    "backward": ("""
w = torch.randn(64, 64, device="npu", requires_grad=True)
x = torch.randn(8, 64, device="npu")
s1.wait_stream(torch.npu.current_stream())
with torch.npu.stream(s1):
    loss = (x @ w).relu().sum()
torch.npu.current_stream().wait_stream(s1)
loss.backward()
torch.npu.synchronize()
print("SILENT" if w.grad is not None else "WRONG")
""", SANITIZED),
    # Kernels compiled by torch.compile are recorded too (const pointer arguments read, the others written): ordered
    # by wait_stream they are silent, unordered they race.
    "compiled": ("""
f = torch.compile(lambda x: (x * 2).sin() + 1)
with torch.npu.stream(s1):
    b = f(a)
s2.wait_stream(s1)
with torch.npu.stream(s2):
    c = b * 3
torch.npu.synchronize()
print("SILENT" if torch.allclose(c.cpu(), ((a.cpu() * 2).sin() + 1) * 3, atol=1e-4) else "WRONG")
with torch.npu.stream(s1):
    b = f(a)
with torch.npu.stream(s2):
    try:
        b * 3
    except _sanitizer.NPUSanitizerErrors as e:
        print("RACE", len(e.errors))
""", SANITIZED),
}


@pytest.fixture(scope="module")
def cases():
    jobs = [(PROLOGUE + code, env) for code, env in CASES.values()]
    return dict(zip(CASES, run_many(jobs)))


def test_enable_npu_sanitizer_call_reports_the_race(cases):
    result = cases["enable_call"]
    assert result.lines == ["RACE 1"], result.describe()
    assert "aten::mul.Tensor" in result.stderr and "aten::add.Tensor" in result.stderr


def test_factory_output_is_a_write(cases):
    result = cases["factory_write"]
    assert result.lines == ["RACE 1"], result.describe()
    assert "aten::new_zeros" in result.stderr and "writing to the output" in result.stderr


def test_write_after_unordered_read_is_reported(cases):
    result = cases["write_after_read"]
    assert result.lines == ["RACE 1"], result.describe()
    assert "aten::zero_" in result.stderr and "aten::sum" in result.stderr


@pytest.mark.parametrize("case", ["two_reads", "record_stream_reuse", "cross_device_copy", "item_then_other_stream",
                                  "backward"])
def test_correctly_ordered_code_is_silent(cases, case):
    result = cases[case]
    assert result.lines == ["SILENT"], result.describe()
    assert "data race" not in result.stderr


def test_sanitizer_off_by_default_reports_nothing():
    # The race is real, so its numbers are not checked.
    code = PROLOGUE + "run(lambda b: None, check=False)\nprint(_sanitizer.npu_sanitizer.enabled)\n"
    (result,) = run_many([(code, {"TORCH_NPU_SANITIZER": None})])
    assert result.lines == ["SILENT", "False"], result.describe()


def test_compiled_kernels_are_recorded(cases):
    result = cases["compiled"]
    assert result.lines == ["SILENT", "RACE 1"], result.describe()
    current, previous = result.stderr.split("Previous access by stream")
    assert "aten::mul.Tensor" in current
    assert "compiled kernel cpp_fused" in previous and "writing to argument(s)" in previous


def test_missing_record_stream_is_reported():
    # torch_npu's check: a storage used on a stream other than its creator's needs record_stream(that stream) unless
    # the creating stream is ordered after the use; flush_record_stream_warnings() lists each use left uncovered.
    code = """
import torch, torch_npu
from torch_npu.npu import _sanitizer
handler = _sanitizer.npu_sanitizer.event_handler
s1, s2 = torch.npu.Stream(), torch.npu.Stream()
main = torch.npu.current_stream()
x, y, z = (torch.ones(64, device="npu") for _ in range(3))
for s in (s1, s2):
    s.wait_stream(main)
x.record_stream(s1)
with torch.npu.stream(s1):
    x + 1  # recorded: covered
    y + 1  # not recorded, and main never waits for s1: needs record_stream
with torch.npu.stream(s2):
    z[:8] + 1  # a view's use counts for its storage
main.wait_stream(s2)  # ... but the creating stream now waits for s2: covered
warnings = handler.flush_record_stream_warnings()
print(len(warnings), warnings[0].usage_stream == s1.npu_stream, warnings[0].data_ptr == y.untyped_storage().data_ptr())
torch.npu.synchronize()
print(len(handler.flush_record_stream_warnings()))
"""
    (result,) = run_many([(code, SANITIZED)])
    assert result.lines == ["1 True True", "0"], result.describe()



# The check at deallocation (torch_npu's): the allocator reports frees from whatever thread drops the last reference (a
# kernel's launch record often does, on a compute thread) into a queue the sanitizer empties on the host. Here x's last
# reference is dropped while x + 1 still waits behind a sleeping kernel, so x is freed on the compute thread after
# `del x`; reading record_stream_errors waits for the launched kernels, and reports it.
DEALLOCATION = """
import gc
import torch, torch_npu
from torch_npu.npu import _sanitizer
handler = _sanitizer.npu_sanitizer.event_handler
main, side = torch.npu.default_stream(), torch.npu.Stream()

def use_on_side(record=False, erase=False):
    x = torch.ones(64, device="npu")
    side.wait_stream(main)
    if record:
        x.record_stream(side)
    if erase:
        torch_npu.erase_stream(x, side)
    with torch.npu.stream(side):
        torch.npu._sleep(20_000_000)  # 20 ms: x + 1 is still queued when x is dropped
        x + 1
    ptr = x.untyped_storage().data_ptr()
    del x
    gc.collect()
    return ptr

ptr = use_on_side()
errors = handler.record_stream_errors
print(len(errors), errors[0].data_ptr == ptr, errors[0].usage_stream == side.npu_stream,
      errors[0].allocation_stream == main.npu_stream)
use_on_side(record=True)
print(len(handler.record_stream_errors))
use_on_side(record=True, erase=True)  # erase_stream undoes record_stream
print(len(handler.record_stream_errors))
"""

# torch_npu's structure: the sanitizer wires torch_npu.npu._stream_check's dispatch mode and event handler to
# torch_npu.utils._npu_trace's callbacks, which are also where c10's GPUTrace reports (torch.npu._gpu_trace).
STRUCTURE = """
import torch, torch_npu
import torch_npu.npu._sanitizer as sanitizer
import torch_npu.npu._stream_check as stream_check
import torch_npu.utils._npu_trace as npu_trace
s = sanitizer.npu_sanitizer
print(s.enabled, s.mode == sanitizer.SanitizerMode.STREAM, type(s.dispatch) is stream_check.NPUSanitizerDispatchMode,
      s.dispatch.event_handler is s.event_handler, isinstance(s.event_handler, stream_check.NPURecordStreamHandler))
print(torch.npu._gpu_trace.EventRecordCallbacks is npu_trace.NPUEventRecordCallbacks,
      [name for _, name in npu_trace.NPURecordStreamCallbacks.callback_list])
# Enabled anew, the new handler replaces the old one in every callback list.
s.dispatch.__exit__(None, None, None)
s.dispatch, s.event_handler, s.enabled = None, None, False
s.enable()
print(len(npu_trace.NPUEventWaitCallbacks.callback_list),
      npu_trace.NPUEventWaitCallbacks.callback_list[0][0].__self__ is s.event_handler)
print(stream_check.NPUSanitizerDispatchMode(s.event_handler).args_handler is None)
s.disable()
print(s.enabled, s.dispatch is None, torch.utils._python_dispatch._get_current_dispatch_mode() is None)
"""

# ASCEND_OPP_DEBUG_PATH: torch_npu's kernel check. The operator package is copied to ./opp_debug_path with the debug
# kernel directory linked in (removed at exit), and each npu op's start and end are printed.
KERNEL_CHECK = """
import os
os.chdir({work!r})
import torch, torch_npu
from torch_npu.npu import _sanitizer
_sanitizer.enable_npu_sanitizer()
link = os.path.join("opp_debug_path", "built-in/op_impl/ai_core/tbe/kernel")
print(_sanitizer.npu_sanitizer.enabled, _sanitizer.npu_sanitizer.mode == _sanitizer.SanitizerMode.KERNEL,
      os.path.islink(link) and os.readlink(link) == os.path.join({debug!r}, "built-in/op_impl/ai_core/tbe/kernel"))
if _sanitizer.npu_sanitizer.enabled:
    def my_step(x):
        return x + 1

    print(my_step(torch.ones(4, device="npu")).sum().item())
    compiled = torch.compile(lambda x: (x * 2).sin())
    print(torch.allclose(compiled(torch.ones(4, device="npu")).cpu(), torch.ones(4).mul(2).sin()))
"""


@pytest.fixture(scope="module")
def structure_cases(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel_check")
    debug = root / "debug_opp"
    (debug / "built-in/op_impl/ai_core/tbe/kernel").mkdir(parents=True)
    work, work_absent = root / "work", root / "work_absent"
    work.mkdir()
    work_absent.mkdir()
    kernel_env = {"ASCEND_OPP_DEBUG_PATH": str(debug), "TORCH_NPU_SANITIZER": None}
    absent_env = {"ASCEND_OPP_DEBUG_PATH": str(root / "absent"), "TORCH_NPU_SANITIZER": None}
    jobs = {"deallocation": (DEALLOCATION, SANITIZED), "structure": (STRUCTURE, SANITIZED),
            "kernel_check": (KERNEL_CHECK.format(work=str(work), debug=str(debug)), kernel_env),
            "kernel_check_absent": (KERNEL_CHECK.format(work=str(work_absent), debug=str(debug)), absent_env)}
    results = dict(zip(jobs, run_many(list(jobs.values()))))
    results["work"] = work
    return results


def test_missing_record_stream_is_reported_when_the_tensor_is_freed(structure_cases):
    result = structure_cases["deallocation"]
    assert result.lines == ["1 True True True", "1", "2"], result.describe()
    assert "without record_stream" in result.stderr


def test_sanitizer_is_built_of_torch_npus_modules(structure_cases):
    result = structure_cases["structure"]
    assert result.lines == ["True True True True True", "True ['handle_record_stream']", "1 True", "True",
                            "False True True"], result.describe()


def test_kernel_check_traces_each_op_with_its_stack(structure_cases):
    result = structure_cases["kernel_check"]
    lines = result.lines
    assert lines[0] == "True True True" and "8.0" in lines, result.describe()
    start = next(i for i, line in enumerate(lines) if line.endswith("====== Start acl operator aten::add.Tensor"))
    assert lines[start + 1].endswith("====== aten::add.Tensor python stack info:"), result.describe()
    assert any("in my_step" in line for line in lines[start + 1:]), result.describe()
    # torch.compile's kernels are traced too.
    assert "True" in lines and any("====== Start acl operator cpp_fused" in line for line in lines), result.describe()
    # The debug copy and its lock are removed at exit.
    assert not any(structure_cases["work"].iterdir())


def test_kernel_check_without_debug_kernels_stays_off(structure_cases):
    result = structure_cases["kernel_check_absent"]
    assert result.lines[-1] == "False True False", result.describe()
    assert "ASCEND_OPP_DEBUG_PATH is not exists." in result.stdout
