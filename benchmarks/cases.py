"""The benchmark cases. Each returns the configurations to time (name -> (device, fn(iterations), baseline?)) and
how to read the result: a time ratio npu / cpu (lower is better), or for copies a bandwidth ratio (higher is better).
"""

import time

import torch

import fused_cases
import models

NPU = "npu:0"


def _ops(device: str, make, op, calls: int = 1):
    """fn(n) calling op n * calls times on operands made on the device."""
    args = make(device)

    def run(n: int) -> None:
        for _ in range(n * calls):
            op(*args)

    return run


def _configs(make, op, baseline: bool = True, calls: int = 1):
    configs = {"cpu": ("cpu", _ops("cpu", make, op, calls), False), "npu": (NPU, _ops(NPU, make, op, calls), False)}
    if baseline:
        configs["baseline"] = (NPU, _ops(NPU, make, op, calls), True)
    return configs


TINY_OPS = 10_000


def tiny_add(numel: int):
    # An iteration is 10,000 adds, then one synchronize (timing.measure synchronizes after each batch).
    return _configs(lambda d: (torch.randn(numel, device=d), torch.randn(numel, device=d)), torch.add,
                    calls=TINY_OPS)


def matmul(dtype: torch.dtype):
    return _configs(lambda d: (torch.randn(2048, 2048, device=d, dtype=dtype),
                               torch.randn(2048, 2048, device=d, dtype=dtype)), torch.matmul, baseline=False)


def conv2d():
    def make(d):
        return (torch.randn(32, 64, 56, 56, device=d), torch.randn(64, 64, 3, 3, device=d))

    return _configs(make, lambda x, w: torch.nn.functional.conv2d(x, w, padding=1), baseline=False)


COPY_BYTES = 64 << 20


def copy(direction: str, pinned: bool):
    """A 64 MiB copy host->npu or npu->host against a CPU copy_ of the same size (blocking, as users call it)."""
    def host():
        t = torch.empty(COPY_BYTES // 4)
        return t.pin_memory() if pinned else t

    def cpu_run():
        src, dst = torch.randn(COPY_BYTES // 4), torch.empty(COPY_BYTES // 4)

        def run(n):
            for _ in range(n):
                dst.copy_(src)

        return run

    def npu_run():
        h, d = host().normal_(), torch.empty(COPY_BYTES // 4, device=NPU)
        src, dst = (h, d) if direction == "H2D" else (d, h)

        def run(n):
            for _ in range(n):
                dst.copy_(src, non_blocking=pinned)
            torch.npu.synchronize()

        return run

    return {"cpu": ("cpu", cpu_run(), False), "npu": (NPU, npu_run(), False)}


def streams(count: int):
    """Two independent chains of work, on two streams or on one. The ratio compares them: below 1, the streams
    overlap."""
    def make(per_stream):
        xs = [torch.randn(384, 384, device=NPU) for _ in range(2)]
        ss = [torch.npu.Stream() for _ in range(2)] if per_stream else [torch.npu.current_stream()] * 2

        def run(n):
            for _ in range(n):
                for x, s in zip(xs, ss):
                    with torch.npu.stream(s):
                        for _ in range(8):
                            torch.mm(x, x)
            for s in ss:
                s.synchronize()

        return run

    return {"one stream": (NPU, make(False), False), "two streams": (NPU, make(True), False)}


def training(name: str):
    return {
        "cpu": ("cpu", models.training_step(name, "cpu"), False),
        "npu": (NPU, models.training_step(name, NPU), False),
        "baseline": (NPU, models.training_step(name, NPU), True),
    }


# Compiled against eager (kind "compiled"): "npu" and "cpu" are torch.compile of the same model on each device (CPU
# Inductor for "cpu"), "eager npu" the model uncompiled; each config runs a training step (models.training_step) or a
# forward pass without autograd (models.inference_step). The first step of each compiled configuration compiles: its
# seconds are kept here, and run.py reports compile time as that minus the steady-state step.
FIRST_STEP_SECONDS: dict = {}


def compiled(name: str, step):
    import torch._inductor.compile_fx  # noqa: F401  imported before timing: the first case would count the import

    configs = {
        "cpu": ("cpu", step(name, "cpu", compiled=True), False),
        "npu": (NPU, step(name, NPU, compiled=True), False),
        "eager npu": (NPU, step(name, NPU), False),
    }
    for config in ("cpu", "npu"):
        start = time.perf_counter()
        configs[config][1](1)
        torch.npu.synchronize()
        FIRST_STEP_SECONDS[config] = time.perf_counter() - start
    return configs


# A training step captured into an NPU graph and replayed (kind "graphed"): "npu" replays the graph (one launch per
# step), "eager npu" runs the same step op by op, "cpu" eagerly on the CPU. SGD with momentum: its state lives on the
# device, so the whole step is captured.
# "small mlp": small enough that launching its ~40 ops costs the host more than running them.
def _sgd_step(name: str, device: str):
    torch.manual_seed(0)
    if name == "small mlp":
        module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(device)
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(8, 64, generator=g).to(device), torch.randint(0, 10, (8,), generator=g).to(device)
    else:
        module = models.MODELS[name]().to(device)
        x, y = models.batch(name, device)
    opt = torch.optim.SGD(module.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=False)
        out = module(x)
        loss_fn(out.reshape(-1, out.shape[-1]), y).backward()
        opt.step()

    return step


def graphed_training(name: str):
    def eager(device: str):
        step = _sgd_step(name, device)
        return lambda n: [step() for _ in range(n)]

    step = _sgd_step(name, NPU)
    side = torch.npu.Stream()
    side.wait_stream(torch.npu.current_stream())
    with torch.npu.stream(side):
        for _ in range(2):
            step()
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph, stream=side):
        step()
    replay = lambda n: [graph.replay() for _ in range(n)]  # noqa: E731
    return {"cpu": ("cpu", eager("cpu"), False), "npu": (NPU, replay, False), "eager npu": (NPU, eager(NPU), False)}


# Half precision on npu against float32 on npu (kind "dtype"): each config is the same work in one dtype.
HALF = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def half_op(make, op, cpu_half: bool = False):
    """The op on npu operands in each dtype of HALF; with cpu_half, also ATen's CPU kernel in float16 (what the host
    gives without softnpu's float32 route)."""
    configs = {name: (NPU, _ops(NPU, lambda d, dt=dt: make(d, dt), op), False) for name, dt in HALF.items()}
    if cpu_half:
        configs["cpu float16"] = ("cpu", _ops("cpu", lambda d: make(d, torch.float16), op), False)
    return configs


def _randn(*shape):
    return lambda d, dt: tuple(torch.randn(*s, device=d, dtype=dt) for s in shape)


HALF_OPS = {
    "mm 256x1024 . 1024x1024": (_randn((256, 1024), (1024, 1024)), torch.mm),
    "bmm 8x128x64 . 8x64x128": (_randn((8, 128, 64), (8, 64, 128)), torch.bmm),
    "conv2d 8x32x28x28, 32 filters 3x3": (_randn((8, 32, 28, 28), (32, 32, 3, 3)),
                                          lambda x, w: torch.nn.functional.conv2d(x, w, padding=1)),
}
# The other op families, in 1M-element or 1024x1024 operands (issue: no worse than a small constant over float32).
HALF_FAMILY = {
    "gelu": (_randn((1 << 20,)), torch.nn.functional.gelu),
    "tanh": (_randn((1 << 20,)), torch.tanh),
    "sum": (_randn((1024, 1024)), lambda x: x.sum(1)),
    "softmax": (_randn((1024, 1024)), lambda x: x.softmax(-1)),
    "layer_norm": (_randn((1024, 1024)), lambda x: torch.nn.functional.layer_norm(x, (1024,))),
    "embedding": (lambda d, dt: (torch.randint(0, 30000, (4096,), device=d), torch.randn(30000, 512, device=d, dtype=dt)),
                  torch.nn.functional.embedding),
}


def half_training(name: str):
    return {
        "float32": (NPU, models.training_step(name, NPU), False),
        "float16": (NPU, models.training_step(name, NPU, amp=torch.float16), False),
        "bfloat16": (NPU, models.training_step(name, NPU, amp=torch.bfloat16), False),
    }


def half_weights_training(name: str, dtype: torch.dtype):
    """Training with the weights themselves in a half dtype (no autocast): npu against the CPU in the same dtype. The
    host's native half units (in the header) decide both sides' speed: npu takes the float32 route where the CPU's
    kernel has none (SOFTNPU_HALF_COMPUTE)."""
    return {
        "cpu": ("cpu", models.training_step(name, "cpu", dtype=dtype), False),
        "npu": (NPU, models.training_step(name, NPU, dtype=dtype), False),
    }


# name -> (make configs, what the ratio is, target description or None, operations per iteration)
CASES = {
    "add, 1 element (per op)": (lambda: tiny_add(1), "time", "npu/cpu <= 2.0", TINY_OPS),
    "add, 65,536 elements (per op)": (lambda: tiny_add(65536), "time", "npu/cpu <= 2.0", TINY_OPS),
    "matmul 2048x2048 float32": (lambda: matmul(torch.float32), "time", "npu/cpu <= 1.05", 1),
    "matmul 2048x2048 bfloat16": (lambda: matmul(torch.bfloat16), "time", "npu/cpu <= 1.05", 1),
    "conv2d 32x64x56x56, 64 filters 3x3": (conv2d, "time", "npu/cpu <= 1.05", 1),
    "copy H2D 64 MiB pageable": (lambda: copy("H2D", False), "bandwidth", None, 1),
    "copy D2H 64 MiB pageable": (lambda: copy("D2H", False), "bandwidth", None, 1),
    "copy H2D 64 MiB pinned": (lambda: copy("H2D", True), "bandwidth", "npu/cpu >= 0.8", 1),
    "copy D2H 64 MiB pinned": (lambda: copy("D2H", True), "bandwidth", "npu/cpu >= 0.8", 1),
    "two streams vs one": (lambda: streams(2), "streams", None, 1),
    "training step, MLP": (lambda: training("mlp"), "time", "npu/cpu <= 1.10; baseline/npu >= 2", 1),
    "training step, CNN": (lambda: training("cnn"), "time", "npu/cpu <= 1.10; baseline/npu >= 2", 1),
    "training step, transformer": (lambda: training("transformer"), "time", "npu/cpu <= 1.10; baseline/npu >= 2", 1),
    "NPU graph: training step, MLP": (lambda: graphed_training("mlp"), "graphed", "replay/eager npu < 1", 1),
    "NPU graph: training step, small MLP": (lambda: graphed_training("small mlp"), "graphed", "replay/eager npu < 1",
                                            1),
    **{f"compiled: {label}, {title}": (lambda m=model, st=step: compiled(m, st), "compiled",
                                        "compiled/eager npu <= 0.8; npu/cpu <= 1.05" if training and model != "mlp"
                                        else "npu/cpu <= 1.05", 1)
       for model, title in (("mlp", "MLP"), ("transformer", "transformer"), ("gpt2 tiny", "GPT-2 tiny"))
       for label, step, training in (("inference", models.inference_step, False),
                                     ("training step", models.training_step, True))},
    **{f"half: {name}": (lambda m=make, o=op: half_op(m, o, cpu_half=True), "dtype", "float16/float32 <= 1.5", 1)
       for name, (make, op) in HALF_OPS.items()},
    **{f"half: {name}": (lambda m=make, o=op: half_op(m, o), "dtype", None, 1) for name, (make, op) in HALF_FAMILY.items()},
    **{f"half: training step, {label}": (lambda m=model: half_training(m), "dtype",
                                         "AMP float16/float32 <= 1.2; AMP bfloat16/float32 <= 1.0 with avx512_bf16", 1)
       for model, label in (("mlp", "MLP"), ("cnn", "CNN"), ("transformer", "transformer"))},
    **{f"{label} weights: training step, {title}": (lambda m=model, d=dtype: half_weights_training(m, d), "time",
                                                    "npu/cpu <= 1.10", 1)
       for model, title, label, dtype in (("llama small", "LLaMA", "bf16", torch.bfloat16),
                                          ("cnn", "CNN", "fp16", torch.float16),
                                          ("cnn", "CNN", "bf16", torch.bfloat16))},
    **fused_cases.CASES,
}
