"""Fork (as torch.cuda): after the parent initialized npu, any npu use in a forked child raises at once "Cannot
re-initialize NPU in forked subprocess..." instead of hanging on compute threads that exist only in the parent. Each
case runs in a forked child under an alarm, so a hang is a failure; the bound asserted is generous (a loaded machine),
the time measured is printed (pytest -s)."""

import pytest

from conftest import run_python

MESSAGE = ("Cannot re-initialize NPU in forked subprocess. To use NPU with multiprocessing, you must use the 'spawn' "
           "start method")
BOUND_S = 10

# Runs each case in a forked child of a parent that used npu; prints "name|seconds|exit status|first line of error".
FORKED_CASES = """
import os, signal, time, torch, torch_npu
x = torch.ones(4, device="npu")
pinned = torch.ones(4).pin_memory()
torch.npu.synchronize()
cases = {
    "factory": lambda: torch.ones(2, device="npu"),
    "npu()": lambda: torch.ones(2).npu(),
    "to(npu)": lambda: torch.ones(2).to("npu"),
    "op on an inherited tensor": lambda: x + 1,
    "in-place op on an inherited tensor": lambda: x.add_(1),
    "copy to the host": lambda: x.cpu(),
    "copy to another device": lambda: x.to("npu:1"),
    "copy from pinned memory": lambda: pinned.to("npu", non_blocking=True),
    "pinned allocation": lambda: torch.empty(4, pin_memory=True),
    "torch.npu.synchronize": lambda: torch.npu.synchronize(),
    "torch.npu.current_device": lambda: torch.npu.current_device(),
    "torch.npu.set_device": lambda: torch.npu.set_device(1),
    "torch.npu.Stream": lambda: torch.npu.Stream(),
    "torch.npu.memory_allocated": lambda: torch.npu.memory_allocated(),
    "torch.npu.manual_seed": lambda: torch.npu.manual_seed(0),
}
for name, case in cases.items():
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)  # a hang is killed, and reported by its status
        try:
            case()
            said = "no error"
        except RuntimeError as e:
            said = str(e).splitlines()[0]
        os.write(w, said.encode())
        os._exit(0)
    os.close(w)
    said = b""
    while chunk := os.read(r, 4096):
        said += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    print(f"{name}|{time.monotonic() - start:.3f}|{status}|{said.decode()}")
# The parent's devices are untouched by its children.
print("parent", (x + 1).sum().item(), torch.npu.is_available())
"""


def test_every_npu_use_in_a_forked_child_raises_at_once():
    result = run_python(FORKED_CASES, timeout=600)
    *rows, parent = result.lines
    assert parent == "parent 8.0 True"
    assert len(rows) == 15
    for row in rows:
        name, seconds, status, said = row.split("|")
        print(f"{name}: {float(seconds) * 1000:.0f} ms")
        assert status == "0", f"{name}: the child was killed (it hung) or crashed: status {status}"
        assert said == MESSAGE, f"{name}: {said}"
        assert float(seconds) < BOUND_S, name


def test_a_forked_child_that_does_not_use_npu_works():
    result = run_python(
        """
        import os, torch, torch_npu
        torch.ones(1, device="npu")
        pid = os.fork()
        if pid == 0:
            ok = not torch.npu.is_available() and torch.npu.device_count() == 0 and torch.npu._is_in_bad_fork()
            torch.manual_seed(0)  # seeds every device's generator where it can: skipped in a bad fork
            ok = ok and (torch.arange(4.0) * 2).sum().item() == 12.0
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), torch.npu._is_in_bad_fork())
        """
    )
    assert result.lines == ["0 False"]


@pytest.mark.parametrize("parent_asked", ["nothing", "availability"])
def test_a_child_of_a_parent_that_never_used_npu_uses_it(parent_asked):
    # Asking whether npu is there (transformers does at import) does not start the runtime, as with torch.cuda.
    ask = "torch.npu.is_available(), torch.npu.device_count(), torch.npu.is_initialized()"
    result = run_python(
        f"""
        import os, torch, torch_npu
        {"print(" + ask + ")" if parent_asked == "availability" else ""}
        pid = os.fork()
        if pid == 0:
            import signal
            signal.alarm(30)
            ok = torch.npu.is_available() and (torch.ones(3, device="npu") + 1).sum().item() == 6.0
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), (torch.ones(2, device="npu") * 3).sum().item())
        """
    )
    assert result.lines[-1] == "0 6.0"
    if parent_asked == "availability":
        assert result.lines[0] == "True 2 False"


DATALOADER = """
import time, torch, torch_npu
from torch.utils.data import DataLoader, Dataset

class {name}(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        {getitem}

torch.ones(1, device="npu")  # the parent initialized npu before the workers fork
loader = DataLoader({name}(), batch_size=8, num_workers=2, multiprocessing_context="fork")
start = time.monotonic()
try:
    total = sum((batch.npu() * 2).sum().item() for batch in loader)
    print("total", total)
except RuntimeError as e:
    print("error", f"{{time.monotonic() - start:.3f}}", "Cannot re-initialize NPU in forked subprocess" in str(e),
          "'spawn' start method" in str(e))
"""


def test_a_dataloader_whose_workers_use_npu_fails_at_once():
    code = DATALOADER.format(name="OnNpu", getitem='return torch.full((2,), float(i), device="npu").cpu()')
    kind, seconds, *found = run_python(code, timeout=300).lines[0].split()
    print(f"the loader failed after {float(seconds) * 1000:.0f} ms")
    assert (kind, found) == ("error", ["True", "True"])
    assert float(seconds) < BOUND_S


def test_a_dataloader_over_cpu_data_feeds_npu():
    code = DATALOADER.format(name="OnCpu", getitem="return torch.full((2,), float(i))")
    assert run_python(code, timeout=300).lines == [f"total {2 * 2 * sum(range(64)):.1f}"]
