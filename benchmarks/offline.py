"""Offline models against onnxruntime on the same host, in the same run (issue 13): resnet18 and a tiny BERT, exported
once with torch.onnx.export, converted by atc (ATC's default precision mode, force_fp16, and force_fp32), run through
ACL (ais_bench's InferSession over pyACL) and through onnxruntime's CPU provider, numpy in and numpy out on both sides.
Latency at batch 1 (median of the runs), throughput at batch 32 (samples per second). Targets: softnpu / onnxruntime
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
ATC = pathlib.Path(sys.executable).with_name("atc")


def median_seconds(fn, rounds: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, batch: int, rounds: int, workdir: pathlib.Path) -> dict:
    import onnxruntime
    from ais_bench.infer.interface import InferSession

    path, inputs, _ = models.export(name, workdir, batch=batch)
    feeds = [np.ascontiguousarray(t.numpy()) for t in inputs]
    ort = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in ort.get_inputs()]
    row = {"onnxruntime": median_seconds(lambda: ort.run(None, dict(zip(names, feeds))), rounds)}
    for mode in ("force_fp16", "force_fp32"):
        out = workdir / f"{name}_{batch}_{mode}"
        subprocess.run([str(ATC), f"--model={path}", "--framework=5", f"--output={out}", "--soc_version=SoftNPU",
                        f"--precision_mode={mode}"], check=True, capture_output=True)
        session = InferSession(0, str(out) + ".om")
        row[f"softnpu {mode}"] = median_seconds(lambda: session.infer(feeds), rounds)
        session.free_resource()
    return row


def main() -> None:
    host = softnpu.host.describe()
    present = [name for name, has in host["features"].items() if has]
    print(f"\noffline models against onnxruntime: host {host['cpu']}, {os.cpu_count()} cores; "
          f"half-precision features: {', '.join(present) or 'none'}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("resnet18", "bert"):
            for batch, rounds in ((1, 30), (32, 5)):
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
