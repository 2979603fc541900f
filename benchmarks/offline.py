"""Offline models against onnxruntime on the same host, in the same run (issue 13): resnet18 and a tiny BERT, exported
once with torch.onnx.export, converted by atc (ATC's default precision mode, force_fp16, and force_fp32), run through
ACL (ais_bench's InferSession over pyACL) and through onnxruntime's CPU provider, numpy in and numpy out on both sides.
Latency at batch 1 (median of the runs), throughput at batch 32 (samples per second); the three engines are timed in
alternating blocks. Targets: softnpu / onnxruntime
<= 1.0 on resnet18, <= 1.3 on the tiny BERT. Writes benchmarks/results/offline.json."""
from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import softnpu.host

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples" / "acl"))
import models  # noqa: E402

RESULTS = HERE / "results"
TARGETS = {"resnet18": 1.0, "bert": 1.3}
# (batch, rounds): about a second of timed calls per row and engine, enough rounds for a stable median.
ROUNDS = {"resnet18": ((1, 40), (32, 5)), "bert": ((1, 300), (32, 30))}
ATC = pathlib.Path(sys.executable).with_name("atc")


def medians_in_blocks(fns: dict, rounds: int, per_block: int = 50, warmup_s: float = 0.1) -> dict:
    """Median seconds of each callable, timed in alternating blocks of consecutive calls (a block of each, then again;
    at least three times), so that a change of the host's speed during the run falls on all of them alike: blocks of
    at most 50 calls, because on a shared host that speed changes within seconds. Each block starts with calls not
    timed, at least two and 100 ms of them: each engine in the steady state it has alone in a process. Switching
    engines is not free: after a block of onnxruntime's runs the tiny BERT at batch 1 took 2.6, 1.9, then 1.0 ms per
    run on softnpu for ~40 runs before its steady 0.69 ms (onnxruntime's pool threads spin on after its runs), and
    timed, those first runs made the ratio 1.5 where the steady states' is 1.2."""
    times = {name: [] for name in fns}
    blocks = max(3, rounds // per_block)
    for _ in range(blocks):
        for name, fn in fns.items():
            start, warm = time.perf_counter(), 0
            while warm < 2 or time.perf_counter() - start < warmup_s:
                fn()
                warm += 1
            for _ in range(max(1, rounds // blocks)):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def measure(name: str, batch: int, rounds: int, workdir: pathlib.Path) -> dict:
    import onnxruntime
    from ais_bench.infer.interface import InferSession

    path, inputs, _ = models.export(name, workdir, batch=batch)
    feeds = [np.ascontiguousarray(t.numpy()) for t in inputs]
    ort = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in ort.get_inputs()]
    fns = {"onnxruntime": lambda: ort.run(None, dict(zip(names, feeds)))}
    sessions = []
    for mode in ("force_fp16", "force_fp32"):
        out = workdir / f"{name}_{batch}_{mode}"
        subprocess.run([str(ATC), f"--model={path}", "--framework=5", f"--output={out}", "--soc_version=Ascend910B3",
                        f"--precision_mode={mode}"], check=True, capture_output=True)
        session = InferSession(0, str(out) + ".om")
        sessions.append(session)
        fns[f"softnpu {mode}"] = lambda session=session: session.infer(feeds)
    try:
        return medians_in_blocks(fns, rounds)
    finally:
        for session in sessions:
            session.free_resource()


def main() -> None:
    host = softnpu.host.describe()
    present = [name for name, has in host["features"].items() if has]
    print(f"\noffline models against onnxruntime: host {host['cpu']}, {os.cpu_count()} cores; "
          f"half-precision features: {', '.join(present) or 'none'}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("resnet18", "bert"):
            for batch, rounds in ROUNDS[name]:
                t = measure(name, batch, rounds, pathlib.Path(tmp))
                row = {"model": name, "batch": batch, "seconds": t, "target": TARGETS[name]}
                for mode in ("force_fp16", "force_fp32"):
                    row[f"{mode}/onnxruntime"] = t[f"softnpu {mode}"] / t["onnxruntime"]
                rows.append(row)
                what = "latency" if batch == 1 else "throughput"
                if batch == 1:
                    figures = "  ".join(f"{k} {v * 1e3:8.2f} ms" for k, v in t.items())
                else:
                    figures = "  ".join(f"{k} {batch / v:8.1f}/s" for k, v in t.items())
                ratios = "  ".join(f"{m}/ort {row[f'{m}/onnxruntime']:.2f}" for m in ("force_fp16", "force_fp32"))
                print(f"{name:<9} batch {batch:<3} {what:<10} {figures}\n{'':30}{ratios}  (target <= {TARGETS[name]})",
                      flush=True)
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "offline.json", "w") as f:
        json.dump({"host": host, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
