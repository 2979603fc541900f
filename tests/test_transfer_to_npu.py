"""softnpu.contrib.transfer_to_npu (torch_npu.contrib.transfer_to_npu): CUDA code runs on npu unchanged.

Importing the module patches torch for the whole process, so every test runs its code in a fresh Python child
(`run_cuda`), which prints a JSON object of what it found for the test to check. This process never imports it:
test_this_process_is_not_patched checks that.
"""

import json
import sys
import textwrap

import pytest
import torch

from conftest import DEVICE_COUNT, run_python

PRELUDE = """\
import json
import torch
from torch_npu.contrib import transfer_to_npu
"""


def run_cuda(code: str, env: dict | None = None, prelude: str = PRELUDE) -> dict:
    """Runs `code` after `prelude` in a fresh Python; returns the JSON object it printed last."""
    r = run_python(prelude + textwrap.dedent(code), env=env)
    assert r.lines, r.describe()
    try:
        return json.loads(r.lines[-1])
    except json.JSONDecodeError:
        pytest.fail(f"the child printed no JSON last:\n{r.describe()}")


def test_is_available_and_the_device_queries():
    out = run_cuda("""
        print(json.dumps({
            "available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
            "current": torch.cuda.current_device(), "name": torch.cuda.get_device_name(0),
            "capability": torch.cuda.get_device_capability(), "is_npu_api": torch.cuda.synchronize.__wrapped__
            is torch.npu.synchronize, "nccl": torch.distributed.is_nccl_available(),
        }))
    """, env={"SOFTNPU_DEVICE_COUNT": 3})  # torch.cuda follows softnpu's configuration
    assert out == {"available": True, "count": 3, "current": 0, "name": torch.npu.get_device_name(0),
                   "capability": None, "is_npu_api": True, "nccl": True}


def test_cuda_methods_move_to_npu():
    out = run_cuda("""
        x = torch.arange(4.0)
        m = torch.nn.Linear(2, 2)
        print(json.dumps({
            "cuda": str(x.cuda().device), "cuda(1)": str(x.cuda(1).device),
            "cuda('cuda:1')": str(x.cuda("cuda:1").device),
            "cuda(device=torch.device('cuda', 1))": str(x.cuda(device=torch.device("cuda", 1)).device),
            "values": x.cuda(1).cpu().tolist(),
            "is_cuda": [x.is_cuda, x.cuda().is_cuda],
            "module": str(m.cuda().weight.device), "module(1)": str(torch.nn.Linear(2, 2).cuda(1).bias.device),
            "storage": str(x.untyped_storage().cuda().device),
        }))
    """)
    assert out == {"cuda": "npu:0", "cuda(1)": "npu:1", "cuda('cuda:1')": "npu:1",
                   "cuda(device=torch.device('cuda', 1))": "npu:1", "values": [0.0, 1.0, 2.0, 3.0],
                   "is_cuda": [False, True], "module": "npu:0", "module(1)": "npu:1", "storage": "npu:0"}


# One call of every function that takes a device.
FACTORIES = {
    "arange": "torch.arange(3, device=D)", "as_tensor": "torch.as_tensor([1.0], device=D)",
    "asarray": "torch.asarray([1.0], device=D)", "bartlett_window": "torch.bartlett_window(4, device=D)",
    "blackman_window": "torch.blackman_window(4, device=D)", "empty": "torch.empty(2, device=D)",
    "empty_like": "torch.empty_like(x, device=D)", "empty_permuted": "torch.empty_permuted((2, 3), (1, 0), device=D)",
    "empty_strided": "torch.empty_strided((2,), (1,), device=D)", "eye": "torch.eye(2, device=D)",
    "full": "torch.full((2,), 1.0, device=D)", "full_like": "torch.full_like(x, 2.0, device=D)",
    "hamming_window": "torch.hamming_window(4, device=D)", "kaiser_window": "torch.kaiser_window(4, device=D)",
    "hann_window": "torch.hann_window(4, device=D)",
    "linspace": "torch.linspace(0, 1, 3, device=D)", "logspace": "torch.logspace(0, 1, 3, device=D)",
    "normal": "torch.normal(0.0, 1.0, (2,), device=D)", "ones": "torch.ones(2, device=D)",
    "ones_like": "torch.ones_like(x, device=D)", "rand": "torch.rand(2, device=D)",
    "rand_like": "torch.rand_like(x, device=D)", "randint": "torch.randint(0, 5, (2,), device=D)",
    "randint_like": "torch.randint_like(x, 5, device=D)", "randn": "torch.randn(2, device=D)",
    "randn_like": "torch.randn_like(x, device=D)", "randperm": "torch.randperm(3, device=D)",
    "range": "torch.range(0, 2, device=D)", "scalar_tensor": "torch.scalar_tensor(1.0, device=D)",
    "tensor": "torch.tensor([1.0], device=D)", "tril_indices": "torch.tril_indices(3, 3, device=D)",
    "triu_indices": "torch.triu_indices(3, 3, device=D)", "zeros": "torch.zeros(2, device=D)",
    "zeros_like": "torch.zeros_like(x, device=D)", "fft.fftfreq": "torch.fft.fftfreq(4, device=D)",
    "fft.rfftfreq": "torch.fft.rfftfreq(4, device=D)", "new_empty": "x.new_empty(2, device=D)",
    "new_empty_strided": "x.new_empty_strided((2,), (1,), device=D)", "new_full": "x.new_full((2,), 1.0, device=D)",
    "new_ones": "x.new_ones(2, device=D)", "new_tensor": "x.new_tensor([1.0], device=D)",
    "new_zeros": "x.new_zeros(2, device=D)",
}


def test_factories_take_cuda_devices():
    out = run_cuda(f"""
        import warnings
        warnings.simplefilter("ignore")  # torch.range
        x = torch.ones(2, 3)
        calls = {{name: eval("lambda D: " + call) for name, call in {FACTORIES!r}.items()}}
        out = {{}}
        for device in ["cuda:1", torch.device("cuda", 1)]:
            for name, call in calls.items():
                out[f"{{name}} {{device!r}}"] = str(call(device).device)
        out["cuda"] = str(torch.zeros(1, device="cuda").device)
        out["values"] = torch.arange(3, device="cuda").cpu().tolist()
        torch.cuda.set_device(1)  # "cuda" is the current device
        out["cuda after set_device(1)"] = str(torch.zeros(1, device="cuda").device)
        out["torch.device('cuda')"] = str(torch.zeros(1, device=torch.device("cuda")).device)
        print(json.dumps(out))
    """)
    assert len(out) == 2 * len(FACTORIES) + 4, out
    for key in [f"{name} {device}" for name in FACTORIES for device in ("'cuda:1'", "device(type='cuda', index=1)")]:
        assert out[key] == "npu:1", key
    assert out["cuda"] == "npu:0" and out["values"] == [0, 1, 2]
    assert out["cuda after set_device(1)"] == "npu:1" and out["torch.device('cuda')"] == "npu:1"


def test_to_takes_cuda_devices():
    out = run_cuda("""
        x = torch.arange(3.0)
        on1 = torch.ones(1, device="npu:1")
        print(json.dumps({
            "to('cuda')": str(x.to("cuda").device), "to('cuda:1')": str(x.to("cuda:1").device),
            "to(torch.device('cuda', 1))": str(x.to(torch.device("cuda", 1)).device),
            "to(device='cuda:1', dtype)": [str(x.to(device="cuda:1", dtype=torch.float16).device),
                                           str(x.to(device="cuda:1", dtype=torch.float16).dtype)],
            "to('cuda', non_blocking=True)": str(x.to("cuda", non_blocking=True).device),
            "to(tensor)": str(x.to(on1).device), "values": x.to("cuda:1").cpu().tolist(),
            "back to cpu": str(x.to("cuda").to("cpu").device),
            "module.to('cuda:1')": str(torch.nn.Linear(2, 2).to("cuda:1").weight.device),
            "module.to(device=torch.device('cuda'), dtype)": str(
                torch.nn.Linear(2, 2).to(device=torch.device("cuda"), dtype=torch.float16).weight.device),
            "to_empty": str(torch.nn.Linear(2, 2, device="meta").to_empty(device="cuda:1").weight.device),
        }))
    """)
    assert out == {
        "to('cuda')": "npu:0", "to('cuda:1')": "npu:1", "to(torch.device('cuda', 1))": "npu:1",
        "to(device='cuda:1', dtype)": ["npu:1", "torch.float16"], "to('cuda', non_blocking=True)": "npu:0",
        "to(tensor)": "npu:1", "values": [0.0, 1.0, 2.0], "back to cpu": "cpu", "module.to('cuda:1')": "npu:1",
        "module.to(device=torch.device('cuda'), dtype)": "npu:0", "to_empty": "npu:1"}


def test_load_a_checkpoint_saved_on_cuda(tmp_path):
    checkpoint = tmp_path / "cuda.pt"
    # A checkpoint as CUDA saves it: storages tagged "cuda:1". Without transfer_to_npu torch cannot load it.
    made = run_cuda(f"""
        import torch.serialization
        torch.serialization.register_package(0, lambda s: "cuda:1" if s.device.type == "cpu" else None,
                                             lambda storage, location: None)
        torch.save({{"w": torch.arange(4.0), "b": torch.ones(2)}}, {str(checkpoint)!r})
        try:
            torch.load({str(checkpoint)!r})
            error = None
        except RuntimeError as e:
            error = str(e)
        print(json.dumps({{"error": error}}))
    """, prelude="import json\nimport torch\n")
    assert made["error"] is not None and "cuda" in made["error"].lower()

    out = run_cuda(f"""
        out = {{}}
        for map_location in [None, "cuda", "cuda:0", torch.device("cuda", 0), {{"cuda:1": "cuda:0"}}, "cpu"]:
            state = torch.load({str(checkpoint)!r}, map_location=map_location)
            out[repr(map_location)] = [str(state["w"].device), state["w"].cpu().tolist()]
        print(json.dumps(out))
    """)
    values = [0.0, 1.0, 2.0, 3.0]
    assert out == {"None": ["npu:1", values],  # where it was saved, as on CUDA
                   "'cuda'": ["npu:0", values], "'cuda:0'": ["npu:0", values],
                   "device(type='cuda', index=0)": ["npu:0", values], "{'cuda:1': 'cuda:0'}": ["npu:0", values],
                   "'cpu'": ["cpu", values]}


def test_cuda_amp_training_step_lowers_the_loss():
    out = run_cuda("""
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        scaler = torch.cuda.amp.GradScaler()
        x = torch.randn(64, 8).cuda()
        y = x.sum(dim=1, keepdim=True).cuda()
        losses = []
        for _ in range(30):
            optimizer.zero_grad()
            with torch.cuda.amp.autocast():
                prediction = model(x)
                loss = torch.nn.functional.mse_loss(prediction.float(), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
        print(json.dumps({
            "losses": losses, "autocast dtype": str(prediction.dtype),
            "parameters": sorted({f"{p.device} {p.dtype}" for p in model.parameters()}),
            "scale": scaler.get_scale(),
            "torch.amp.GradScaler() enabled": torch.amp.GradScaler().is_enabled(),  # torch's default is "cuda"
            "torch.amp.GradScaler('cuda') enabled": torch.amp.GradScaler("cuda").is_enabled(),
        }))
    """)
    losses = out["losses"]
    assert all(loss == loss for loss in losses), losses  # no NaN
    assert losses[-1] < 0.5 * losses[0], losses
    assert out["autocast dtype"] == "torch.float16"
    assert out["parameters"] == ["npu:0 torch.float32"]
    assert out["scale"] > 0
    assert out["torch.amp.GradScaler() enabled"] and out["torch.amp.GradScaler('cuda') enabled"]


def test_torch_autocast_cuda():
    out = run_cuda("""
        a = torch.ones(4, 4, device="cuda")
        out = {"outside": [torch.is_autocast_enabled("cuda"), torch.is_autocast_enabled()]}
        with torch.autocast("cuda"):
            out["default"] = [str((a @ a).dtype), torch.is_autocast_enabled("cuda"), torch.is_autocast_enabled("npu"),
                              torch.is_autocast_enabled(), str(torch.get_autocast_dtype("cuda")),
                              str(torch.get_autocast_gpu_dtype())]
        with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16):
            out["bfloat16"] = [str((a @ a).dtype), str(torch.get_autocast_gpu_dtype())]
        with torch.autocast("cuda", enabled=False):
            out["disabled"] = str((a @ a).dtype)

        @torch.autocast("cuda")
        def decorated():
            return str((a @ a).dtype)

        out["decorator"] = decorated()
        torch.set_autocast_enabled(True)  # the legacy form without a device type meant CUDA
        out["set_autocast_enabled(True)"] = [str((a @ a).dtype), torch.is_autocast_enabled("npu")]
        torch.set_autocast_enabled(False)
        print(json.dumps(out))
    """)
    assert out == {"outside": [False, False],
                   "default": ["torch.float16", True, True, True, "torch.float16", "torch.float16"],
                   "bfloat16": ["torch.bfloat16", "torch.bfloat16"], "disabled": "torch.float32",
                   "decorator": "torch.float16", "set_autocast_enabled(True)": ["torch.float16", True]}


def test_default_device_cuda():
    out = run_cuda("""
        out = {}
        with torch.device("cuda"):
            out["with cuda"] = [str(torch.empty(2).device), str(torch.nn.Linear(2, 2).weight.device)]
        with torch.device("cuda:1"):
            out["with cuda:1"] = str(torch.zeros(2).device)
        out["after"] = str(torch.empty(2).device)
        torch.set_default_device("cuda:1")
        out["set_default_device"] = [str(torch.ones(1).device), str(torch.get_default_device())]
        torch.set_default_device(None)
        out["reset"] = str(torch.ones(1).device)
        print(json.dumps(out))
    """)
    assert out == {"with cuda": ["npu:0", "npu:0"], "with cuda:1": "npu:1", "after": "cpu",
                   "set_default_device": ["npu:1", "npu:1"], "reset": "cpu"}


def test_streams_events_and_memory():
    out = run_cuda("""
        out = {}
        s = torch.cuda.Stream()
        out["Stream is torch.npu.Stream"] = type(s) is torch.npu.Stream
        out["Stream(device='cuda:1')"] = str(torch.cuda.Stream(device="cuda:1").device)
        out["current_stream('cuda:1')"] = str(torch.cuda.current_stream("cuda:1").device)
        x = torch.randn(256, 256, device="cuda")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            out["current stream in the context"] = torch.cuda.current_stream() == s
            start.record()
            y = (x @ x).sum()
            end.record()
        torch.cuda.synchronize()
        out["events"] = [end.query(), start.elapsed_time(end) >= 0]
        out["result"] = abs(y.item() - (x.cpu() @ x.cpu()).sum().item()) <= 1e-3 * abs(y.item()) + 1e-2

        before = torch.cuda.memory_allocated()
        block = torch.empty(1 << 20, device="cuda")  # 4 MiB: a block of 4 MiB + 512 (torch_npu's 32-byte pad)
        out["memory_allocated grew by"] = torch.cuda.memory_allocated() - before
        out["memory_allocated('cuda:1')"] = torch.cuda.memory_allocated("cuda:1")
        out["max >= allocated"] = torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated()
        del block
        torch.cuda.empty_cache()
        out["freed"] = torch.cuda.memory_allocated() == before

        torch.cuda.set_device("cuda:1")
        out["set_device('cuda:1')"] = torch.cuda.current_device()
        with torch.cuda.device(0):
            out["with torch.cuda.device(0)"] = torch.cuda.current_device()
        torch.cuda.manual_seed(7)
        a = torch.randn(3, device="cuda").cpu()
        torch.cuda.manual_seed(7)
        out["manual_seed"] = torch.equal(a, torch.randn(3, device="cuda").cpu())
        print(json.dumps(out))
    """)
    assert out == {"Stream is torch.npu.Stream": True, "Stream(device='cuda:1')": "npu:1",
                   "current_stream('cuda:1')": "npu:1", "current stream in the context": True,
                   "events": [True, True], "result": True, "memory_allocated grew by": (4 << 20) + 512,
                   "memory_allocated('cuda:1')": 0, "max >= allocated": True, "freed": True,
                   "set_device('cuda:1')": 1, "with torch.cuda.device(0)": 0, "manual_seed": True}


def test_init_process_group_nccl(tmp_path):
    out = run_cuda(f"""
        import torch.distributed as dist
        dist.init_process_group("nccl", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
        out = {{"backend": dist.get_backend()}}
        x = torch.full((4,), 3.0, device="cuda")
        dist.all_reduce(x)
        out["all_reduce"] = [str(x.device), x.cpu().tolist()]
        group = dist.new_group([0], backend="cpu:gloo,cuda:nccl")
        on_cpu, on_npu = torch.ones(2), torch.ones(2).cuda()
        dist.all_reduce(on_cpu, group=group)
        dist.all_reduce(on_npu, group=group)
        out["mixed group"] = [on_cpu.tolist(), str(on_npu.device), on_npu.cpu().tolist()]
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1).cuda(), device_ids=[0])
        model(torch.ones(2, 3).cuda()).sum().backward()
        out["ddp grad"] = [str(model.module.weight.grad.device), model.module.weight.grad.cpu().tolist()]
        dist.destroy_process_group()
        print(json.dumps(out))
    """)
    assert out == {"backend": "hccl", "all_reduce": ["npu:0", [3.0] * 4],
                   "mixed group": [[1.0, 1.0], "npu:0", [1.0, 1.0]], "ddp grad": ["npu:0", [[2.0, 2.0, 2.0]]]}


@pytest.mark.parametrize("first, second", [("softnpu.contrib.transfer_to_npu", "torch_npu.contrib.transfer_to_npu"),
                                           ("torch_npu.contrib.transfer_to_npu", "softnpu.contrib.transfer_to_npu")])
def test_importing_twice_changes_nothing(first, second):
    out = run_cuda(f"""
        import importlib
        import inspect
        import torch.distributed as dist
        import torch.serialization

        def patched():
            module = importlib.import_module("softnpu.contrib.transfer_to_npu")
            owners = [(torch, name) for name in module._TORCH_FUNCTIONS + module._AUTOCAST_CUDA_BY_DEFAULT]
            owners += [(torch.Tensor, name) for name in module._TENSOR_METHODS + ("cuda",)]
            owners += [(torch.nn.Module, "to"), (torch.nn.Module, "cuda"), (torch.amp.GradScaler, "__init__"),
                       (torch.amp.autocast, "__init__"), (dist, "init_process_group"), (torch.cuda, "is_available"),
                       (torch.cuda, "synchronize"), (torch.npu.Stream, "__new__")]
            return {{f"{{getattr(owner, '__name__', owner)}}.{{name}}": inspect.getattr_static(owner, name)
                    for owner, name in owners}}

        first = importlib.import_module({first!r})
        before = patched()
        registry = list(torch.serialization._package_registry)
        second = importlib.import_module({second!r})
        after = patched()
        mark = "_softnpu_transfer_to_npu"
        unwrap = lambda f: getattr(f, "__func__", f)
        print(json.dumps({{
            "same module": first is second,
            "changed": sorted(name for name in before if after[name] is not before[name]),
            "registry unchanged": torch.serialization._package_registry == registry,
            "wrapped twice": sorted(name for name, f in after.items()
                                    if getattr(getattr(unwrap(f), "__wrapped__", None), mark, False)),
            "not wrapped": sorted(name for name, f in after.items() if not hasattr(unwrap(f), "__wrapped__")),
        }}))
    """, prelude="import json\nimport torch\n")
    assert out == {"same module": True, "changed": [], "registry unchanged": True, "wrapped twice": [],
                   "not wrapped": []}


def test_every_function_with_a_device_argument_is_patched():
    """The module's claim: _TORCH_FUNCTIONS holds every public torch function whose ATen schema takes a `device`.

    Each aten schema with a `device` argument is mapped to the Python callable it backs: torch.<name>,
    torch.fft.<name> for fft_<name>, else the Tensor method <name>; private ops (a leading underscore) have no
    public callable. Every such callable must be one the module wrapped.
    """
    out = run_cuda("""
        import inspect
        owners = {"torch": torch, "torch.fft": torch.fft, "torch.Tensor": torch.Tensor}
        excluded = {"Generator"}  # a C type: torch.Generator(device="cuda") is documented as not translated
        mapped, unmapped = set(), set()
        for schema in torch._C._jit_get_all_schemas():
            namespace, _, name = schema.name.partition("::")
            if namespace != "aten" or name.startswith("_") or name in excluded:
                continue
            if not any(argument.name == "device" for argument in schema.arguments):
                continue
            if name.startswith("fft_"):
                mapped.add(("torch.fft", name[len("fft_"):]))
            elif hasattr(torch, name):
                mapped.add(("torch", name))
            elif hasattr(torch.Tensor, name):
                mapped.add(("torch.Tensor", name))
            else:
                unmapped.add(name)
        unpatched = [f"{owner}.{name}" for owner, name in mapped
                     if not getattr(inspect.getattr_static(owners[owner], name), "_softnpu_transfer_to_npu", False)]
        print(json.dumps({
            "mapped": sorted(f"{owner}.{name}" for owner, name in mapped), "unmapped": sorted(unmapped),
            "unpatched": sorted(unpatched),
            "torch functions not listed": sorted({name for owner, name in mapped if owner == "torch"}
                                                 - set(transfer_to_npu._TORCH_FUNCTIONS)),
            "tensor methods not listed": sorted({name for owner, name in mapped if owner == "torch.Tensor"}
                                                - set(transfer_to_npu._TENSOR_METHODS)),
        }))
    """)
    assert out["unmapped"] == [] and out["unpatched"] == [], out
    assert out["torch functions not listed"] == [] and out["tensor methods not listed"] == [], out
    # The enumeration found what it is about (a broken enumeration would find nothing to check).
    assert {"torch.randn", "torch.zeros_like", "torch.fft.fftfreq", "torch.Tensor.to", "torch.Tensor.new_zeros"} \
        <= set(out["mapped"]), out


def test_code_that_does_not_import_it_is_unaffected():
    out = run_cuda("""
        import softnpu.contrib
        import torch_npu
        import torch_npu.contrib
        try:
            torch.zeros(1, device="cuda")
            factory = "ok"
        except (RuntimeError, AssertionError) as e:
            factory = type(e).__name__
        print(json.dumps({
            "available": torch.cuda.is_available(), "count": torch.cuda.device_count(), "factory": factory,
            "imported": "softnpu.contrib.transfer_to_npu" in sys.modules,
            "randn wrapped": hasattr(torch.randn, "__wrapped__"),
            "is_cuda": torch.ones(1, device="npu").is_cuda,
        }))
    """, prelude="import json\nimport sys\nimport torch\n")
    assert out == {"available": False, "count": 0, "factory": "AssertionError",  # Torch not compiled with CUDA
                   "imported": False, "randn wrapped": False, "is_cuda": False}


def test_this_process_is_not_patched():
    assert "softnpu.contrib.transfer_to_npu" not in sys.modules
    assert not torch.cuda.is_available()
    assert not hasattr(torch.randn, "__wrapped__") and not hasattr(torch.Tensor.to, "__wrapped__")
    assert torch.ones(1, device="npu").is_cuda is False
    assert torch.cuda.device_count() == 0 and torch.npu.device_count() == DEVICE_COUNT


def test_memory_debugging_and_legacy_types():
    out = run_cuda("""
        import types
        out = {}
        torch.cuda.memory._record_memory_history(stacks="python")
        x = torch.empty(1000, device="cuda")
        snap = torch.cuda.memory._snapshot()
        out["block recorded"] = any(b["address"] == x.data_ptr() and b["frames"]
                                    for s in snap["segments"] for b in s["blocks"])
        out["memory is a module"] = isinstance(torch.cuda.memory, types.ModuleType)
        t = torch.cuda.FloatTensor(2, 3)
        out["FloatTensor"] = [str(t.device), isinstance(t, torch.cuda.FloatTensor)]
        torch.cuda.set_per_process_memory_fraction(0.5)
        out["fraction"] = torch.cuda.get_per_process_memory_fraction()
        out["hf32"] = torch.cuda.matmul.allow_hf32
        print(json.dumps(out))
    """)
    assert out == {"block recorded": True, "memory is a module": True, "FloatTensor": ["npu:0", True],
                   "fraction": 0.5, "hf32": False}


def test_amp_submodules_and_profiler_kernels_are_npu_ones():
    out = run_cuda("""
        import torch_npu
        from torch.autograd.profiler_util import Kernel
        out = {name: getattr(torch.cuda.amp, name) is getattr(torch_npu.npu.amp, name)
               for name in ("autocast_mode", "common", "grad_scaler")}
        out["amp available"] = not torch.cuda.amp.common.amp_definitely_not_available()
        out["Kernel"] = Kernel("model_inference", "cuda", 11).device
        from torch.utils import cpp_extension
        out["include_paths"] = cpp_extension.include_paths(device_type="cuda") == cpp_extension.include_paths("npu")
        print(json.dumps(out))
    """)
    assert out == {"autocast_mode": True, "common": True, "grad_scaler": True, "amp available": True,
                   "Kernel": "npu", "include_paths": True}


def test_cuda_generators_events_streams_and_device_module():
    out = run_cuda("""
        g = torch.Generator("cuda").manual_seed(3)
        same = torch.Generator(device="cuda:0").manual_seed(3)
        event, stream = torch.Event("cuda", enable_timing=True), torch.Stream("cuda:1")
        print(json.dumps({
            "generator": str(g.device), "draws": torch.rand(3, generator=g, device="cuda").tolist() ==
            torch.rand(3, generator=same, device="cuda").tolist(),
            "isinstance": [isinstance(torch.default_generator, torch.Generator), isinstance(g, torch.Generator),
                           isinstance(torch.npu.current_stream(), torch.Stream), isinstance(event, torch.Event),
                           issubclass(torch.npu.Event, torch.Event)],
            "event": event.device.type, "stream": str(stream.device),
            "default_generators": [str(x.device) for x in torch.cuda.default_generators],
            "device_module": torch.get_device_module("cuda") is torch.npu,
        }))
    """)
    assert out == {"generator": "npu:0", "draws": True, "isinstance": [True] * 5, "event": "npu", "stream": "npu:1",
                   "default_generators": [f"npu:{i}" for i in range(DEVICE_COUNT)], "device_module": True}


def test_torchscript_accepts_the_stand_in_generator_type(tmp_path):
    # TorchScript reads the function's source, so this child runs a file.
    script = tmp_path / "scripted.py"
    script.write_text(PRELUDE + textwrap.dedent("""
        from typing import Optional

        @torch.jit.script
        def scripted(n: int, gen: Optional[torch.Generator] = None):
            return torch.rand(n, generator=gen)

        print(json.dumps(scripted(2, torch.Generator().manual_seed(0)).tolist()))
    """))
    r = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert json.loads(r.lines[-1]) == torch.rand(2, generator=torch.Generator().manual_seed(0)).tolist()


def test_torch_transfer_to_npu_variable_patches_at_import_torch():
    code = """
        import json, torch
        print(json.dumps([str(torch.ones(1, device="cuda").device), torch.cuda.is_available(),
                          str(torch.randn(2).cuda().device)]))
    """
    out = run_cuda(code, env={"TORCH_TRANSFER_TO_NPU": "1"}, prelude="")
    assert out == ["npu:0", True, "npu:0"]
    off = run_python("import torch\nprint(torch.cuda.is_available())", env={"TORCH_TRANSFER_TO_NPU": "0"})
    assert off.lines == ["False"]
    bad = run_python("import torch\nprint(hasattr(torch, 'npu'))", env={"TORCH_TRANSFER_TO_NPU": "yes"})
    assert bad.lines == ["False"] and "TORCH_TRANSFER_TO_NPU='yes'" in bad.stderr


def test_torch_npus_helpers_and_distributed_names(tmp_path):
    config = tmp_path / "apis.json"
    config.write_text('{"pkg": {"version": "1.0", "apis": {"m.f": "function"}}}')
    out = run_cuda(f"""
        import logging
        import torch_npu
        from torch_npu.contrib import transfer_to_npu as t

        @t._wrapper_cuda
        def devices(*args, **kwargs):
            return [str(a) for a in args], {{k: str(v) for k, v in kwargs.items()}}

        @t._wrapper_hccl
        def group(*args, **kwargs):
            return args, kwargs

        @t._wrapper_libraries_func
        def cuda_seen():
            return torch.cuda.is_available()

        warnings = []
        logging.warning = lambda message, *a: warnings.append(message)
        profiled = t._wrapper_profiler(lambda **kwargs: sorted(kwargs))
        npu_config = torch_npu.profiler._ExperimentalConfig()
        backend_map = torch.distributed.Backend.default_device_backend_map
        print(json.dumps({{
            "dict": t._replace_cuda_to_npu_in_dict({{"cuda:1": "cuda:0", "cuda_version": "12", "n": 1}}),
            "device_ids": devices("cuda:1", device_ids=("cuda:0", torch.device("cuda", 1)), device="cuda"),
            "device_ids list": devices(device_ids=["cuda:1", 0]),
            "hccl": group("nccl", "tcp://127.0.0.1:29500", backend="cpu:gloo,cuda:nccl"),
            "libraries": [cuda_seen(), torch.cuda.is_available()],
            "json": [t._load_json_file({str(config)!r}), t._load_json_file({str(tmp_path / "absent.json")!r})],
            "profiler": [profiled(experimental_config="not a config"), len(warnings),
                         profiled(experimental_config=npu_config), len(warnings)],
            "profile is npu's": torch.profiler.profile is torch_npu.profiler.profile,
            "nccl group": torch.distributed.ProcessGroupNCCL is torch_npu._C._distributed_c10d.ProcessGroupHCCL,
            "options": type(torch.distributed.ProcessGroupNCCL.Options()).__name__,
            "backend by device": [backend_map.get("cuda"), backend_map.get("npu")],
            "host empty cache": torch._C._host_emptyCache is torch_npu._C._npu_hostEmptyCache,
        }}))
        torch._C._host_emptyCache()
    """)
    assert out == {
        # torch_npu's textual replacement in keys and values
        "dict": {"npu:1": "npu:0", "npu_version": "12", "n": 1},
        "device_ids": [["npu:1"], {"device_ids": "('npu:0', device(type='npu', index=1))", "device": "npu"}],
        "device_ids list": [[], {"device_ids": "['npu:1', 0]"}],
        "hccl": [["hccl", "tcp://127.0.0.1:29500"], {"backend": "cpu:gloo,npu:hccl"}],
        "libraries": [False, True],  # CUDA's own answer inside a wrapped library function
        "json": [{"pkg": {"version": "1.0", "apis": {"m.f": "function"}}}, {}],
        "profiler": [[], 1, ["experimental_config"], 1],
        "profile is npu's": True, "nccl group": True, "options": "Options",
        "backend by device": [None, "hccl"], "host empty cache": True,
    }


def test_check_input_file_valid(tmp_path):
    good, big = tmp_path / "good.json", tmp_path / "big.json"
    good.write_text("{}")
    big.write_bytes(b" " * (10 * 1024 ** 2 + 1))
    (tmp_path / "link.json").symlink_to(good)
    long_name = tmp_path / ("a" * 201)
    long_name.write_text("{}")
    out = run_cuda(f"""
        paths = {[str(good), str(big), str(tmp_path / "link.json"), str(long_name), str(tmp_path / "absent")]!r}
        print(json.dumps([transfer_to_npu._check_input_file_valid(p) for p in paths]))
    """)
    assert out == [True, False, False, False, False]


def test_libraries_take_their_npu_path():
    # peft's infer_device() asks torch.cuda.is_available() first: listed in apis_config.json, it sees CUDA's answer
    # and finds npu, where it would answer "cuda" under transfer_to_npu; wrapped when peft is imported, after it.
    pytest.importorskip("peft")
    out = run_cuda("""
        import sys
        imported_before = "peft" in sys.modules
        from peft.utils.other import infer_device
        print(json.dumps([imported_before, infer_device(), torch.cuda.is_available()]))
    """)
    assert out == [False, "npu", True]
