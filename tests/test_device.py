"""torch.npu's device functions, against what torch.cuda's documentation promises for the same calls."""

import threading

import pytest
import torch
from conftest import DEVICE_COUNT, MEMORY_MB, MiB, run_many, run_python


def test_is_available_and_device_count():
    assert torch.npu.is_available() is True
    assert torch.npu.device_count() == DEVICE_COUNT


def test_device_count_capacity_and_visibility_follow_the_configuration():
    # Each configuration needs its own process (the runtime reads the variables once); they run concurrently.
    probe = """
        import torch, torch_npu, softnpu
        n = torch.npu.device_count()
        p = torch.npu.get_device_properties(0)
        threads = softnpu._C._get_device_properties(0)["compute_threads"]  # SOFTNPU_CORES (AI cores are the chip's)
        print(n, p.total_memory, threads, torch.npu.mem_get_info(0)[1])
        print([torch.npu.get_device_properties(i).physical_index for i in range(n)])
        x = torch.ones(4, device=f"npu:{n - 1}") * 3
        print(x.device, x.cpu().tolist())
        try:
            torch.ones(1, device=f"npu:{n}")
        except RuntimeError as e:
            print("invalid", f"npu:{n}" in str(e))
    """
    three, small, single, visible = run_many([
        (probe, {"SOFTNPU_DEVICE_COUNT": 3}),
        (probe, {"SOFTNPU_MEMORY_MB": 300}),
        (probe, {"SOFTNPU_CORES": 1}),
        # As on Ascend: the devices seen are those listed, renumbered from 0 in the order given.
        (probe, {"SOFTNPU_DEVICE_COUNT": 3, "ASCEND_RT_VISIBLE_DEVICES": "2,0"}),
    ])
    assert three.lines[0].split()[0] == "3"
    assert three.lines[2:] == ["npu:2 [3.0, 3.0, 3.0, 3.0]", "invalid True"]
    count, total, _, info_total = map(int, small.lines[0].split())
    assert total == 300 * MiB and info_total == 300 * MiB
    assert single.lines[0].split()[2] == "1"
    assert visible.lines[0].split()[0] == "2"
    assert visible.lines[1:] == ["[2, 0]", "npu:1 [3.0, 3.0, 3.0, 3.0]", "invalid True"]


def test_current_device_and_set_device():
    assert torch.npu.current_device() == 0
    torch.npu.set_device(1)
    assert torch.npu.current_device() == 1
    # Tensors created for "npu" go to the current device.
    assert torch.ones(1, device="npu").device == torch.device("npu:1")
    assert torch.ones(1).npu().device == torch.device("npu:1")
    # CUDA: "If this argument is negative, this function is a no-op."
    torch.npu.set_device(-1)
    assert torch.npu.current_device() == 1
    torch.npu.set_device("npu:0")
    assert torch.npu.current_device() == 0
    torch.npu.set_device(torch.device("npu", 1))
    assert torch.npu.current_device() == 1


def test_set_device_to_a_missing_device_raises_a_clear_error():
    with pytest.raises(RuntimeError, match=r"(?i)invalid device.*5") as info:
        torch.npu.set_device(5)
    assert str(DEVICE_COUNT) in str(info.value)  # says how many devices there are
    assert torch.npu.current_device() == 0  # unchanged


def test_the_current_device_is_per_thread():
    torch.npu.set_device(1)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.npu.current_device()))
    thread.start()
    thread.join()
    assert seen == [0]  # a new thread starts on device 0, as with CUDA
    assert torch.npu.current_device() == 1


def test_device_context_manager():
    with torch.npu.device(1):
        assert torch.npu.current_device() == 1
        assert torch.empty(1, device="npu").device.index == 1
        with torch.npu.device("npu:0"):
            assert torch.npu.current_device() == 0
        assert torch.npu.current_device() == 1
    assert torch.npu.current_device() == 0
    # None and negative indices do nothing (torch.cuda.device's contract).
    for no_op in (None, -1):
        with torch.npu.device(no_op):
            assert torch.npu.current_device() == 0
    # The previous device comes back when the block raises.
    with pytest.raises(ValueError):
        with torch.npu.device(torch.device("npu:1")):
            raise ValueError
    assert torch.npu.current_device() == 0


def test_device_of():
    on_one = torch.ones(2, device="npu:1")
    with torch.npu.device_of(on_one):
        assert torch.npu.current_device() == 1
    assert torch.npu.current_device() == 0
    with torch.npu.device_of(torch.ones(2)):  # a CPU tensor: no-op
        assert torch.npu.current_device() == 0


def test_device_name_properties_and_capability():
    for d in (0, 1):
        p = torch.npu.get_device_properties(d)
        assert isinstance(p.name, str) and p.name
        assert torch.npu.get_device_name(d) == p.name
        assert p.total_memory == MEMORY_MB * MiB
        assert isinstance(p.multi_processor_count, int) and p.multi_processor_count >= 1
        assert p.major is None and p.minor is None and p.warp_size is None  # torch_npu's: CUDA-only fields
        assert len(str(p.uuid)) == 36 and len(p.uuid.bytes) == 16
    # The device may be named every way torch.cuda accepts; None is the current device.
    assert torch.npu.get_device_properties("npu:1") == torch.npu.get_device_properties(torch.device("npu", 1))
    assert torch.npu.get_device_name() == torch.npu.get_device_name(0)
    with pytest.raises(RuntimeError, match="5"):
        torch.npu.get_device_properties(5)


def test_capability_is_none_unless_configured_and_uuid_names_the_physical_device(monkeypatch):
    monkeypatch.delenv("TORCH_NPU_DEVICE_CAPABILITY", raising=False)
    with pytest.warns(UserWarning, match="TORCH_NPU_DEVICE_CAPABILITY"):
        assert torch.npu.get_device_capability() is None  # torch_npu's answer: an NPU has no CUDA capability
    monkeypatch.setenv("TORCH_NPU_DEVICE_CAPABILITY", "8.9")
    with pytest.warns(UserWarning):
        assert torch.npu.get_device_capability("npu:1") == (8, 9)
    monkeypatch.setenv("TORCH_NPU_DEVICE_CAPABILITY", "8.x")
    with pytest.warns(UserWarning, match="can't parse"):
        assert torch.npu.get_device_capability(0) is None
    uuids = [torch.npu.get_device_properties(d).uuid for d in (0, 1)]
    assert uuids[0] != uuids[1] and "uuid=" in repr(torch.npu.get_device_properties(0))
    # Another process that sees device 1 first calls it npu:0, and reads the same uuid for it.
    out = run_python("import torch; print(torch.npu.get_device_properties(0).uuid)",
                     env={"ASCEND_RT_VISIBLE_DEVICES": "1"})
    assert out.stdout.strip() == str(uuids[1])


def test_is_initialized_and_init_in_a_fresh_process():
    result = run_python(
        """
        import torch, torch_npu
        print(torch.npu.is_initialized())
        torch.npu.is_available(); torch.npu.device_count()
        print(torch.npu.is_initialized())  # neither initializes, as in CUDA
        torch.ones(1, device="npu")
        print(torch.npu.is_initialized())  # the first tensor does
        torch.npu.init()
        print(torch.npu.is_initialized())
        """
    )
    assert result.lines == ["False", "False", "True", "True"]


def test_init_initializes():
    result = run_python("import torch, torch_npu; torch.npu.init(); print(torch.npu.is_initialized())")
    assert result.lines == ["True"]


def test_utilization_is_a_percentage():
    u = torch.npu.utilization()
    assert isinstance(u, int) and 0 <= u <= 100
    # A device kept busy by a kernel reports it.
    torch.npu._sleep(600_000_000)
    torch.npu.synchronize()
    busy = torch.npu.utilization()
    assert 0 < busy <= 100


def test_synchronize_accepts_every_way_of_naming_a_device():
    for d in (None, 0, 1, "npu:1", torch.device("npu", 0)):
        torch.npu.synchronize(d)


def test_bf16_and_amp_dtypes():
    assert torch.npu.is_bf16_supported() is True
    supported = torch.npu.get_amp_supported_dtype()
    assert torch.float16 in supported and torch.bfloat16 in supported


def test_torch_npu_is_the_same_module():
    import torch_npu.npu
    from torch_npu.npu.amp import GradScaler

    assert torch_npu.npu is torch.npu
    assert GradScaler is torch.npu.amp.GradScaler
    scaler = GradScaler()
    assert scaler.is_enabled()


def test_import_torch_alone_registers_npu():
    # The backend registers itself through the torch.backends entry point: no import of softnpu or torch_npu.
    result = run_python(
        """
        import sys, torch
        x = torch.ones(2, 2, device="npu")
        print(torch.npu.is_available(), x.device, (x + x).cpu().sum().item(), x.is_npu)
        """
    )
    assert result.lines == ["True npu:0 8.0 True"]


def test_forked_child_refuses_an_initialized_device():
    # As torch.cuda: the runtime's threads do not survive fork, so a child must not use the parent's device.
    result = run_python(
        """
        import os, torch, torch_npu
        torch.ones(1, device="npu")
        pid = os.fork()
        if pid == 0:
            ok = not torch.npu.is_available() and not torch.npu.is_initialized()
            try:
                torch.npu.init()
            except RuntimeError as e:
                ok = ok and "spawn" in str(e)
            else:
                ok = False
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """
    )
    assert result.lines == ["0"]


def test_exit_after_a_backward_is_clean():
    # The autograd engine's npu thread may still hold the last backward's graph task, with a Python object in it, when
    # the interpreter finalizes: dropping it then aborted the process (exit status 134) in about one run of three.
    # Each child exits right after its backward, as a training script does; one at a time, as the window is narrower on
    # a loaded host. A race: without the fix, 24 runs caught it in 4 of 6 tries on a loaded 2-core host.
    code = "import torch\nx = torch.randn(4, 8, device='npu', requires_grad=True)\n(x * 2).sum().backward()\n"
    for result in run_many([(code, None)] * 24, check=False, parallel=1):
        assert result.returncode == 0, result.describe()
