"""DeepSpeed's npu paths on softnpu: installs the pinned DeepSpeed into this venv (from PyPI, --no-deps with its light
dependencies, DS_BUILD_OPS=0: torch is never replaced), then runs DeepSpeed's CPU Adam op builder against torch_npu's
headers (cpu_adam.py) and ZeRO training steps on 2 processes (zero_train.py), each against the CPU. Prints each
case's figures as JSON; exits 1 on a difference beyond TOLERANCE.

    python tests/clients/deepspeed_npu/run.py [--cases zero1,zero2,zero3,zero2_offload,fused_adam] [--no-cpu-adam]

`make deepspeed-npu` runs every case; tests/test_deepspeed_npu.py runs them as pytest cases (a slice in make test).
"""
import argparse
import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DEEPSPEED_VERSION = "0.19.8"
# What DeepSpeed imports beyond what the venv has (pip install --dry-run lists these and DeepSpeed, not torch).
LIGHT_DEPS = ["einops==0.8.2", "hjson==3.1.0", "msgpack==1.2.4", "py-cpuinfo==9.0.0"]
ALL_CASES = ["zero1", "zero2", "zero3", "zero2_offload", "fused_adam"]
# float32 throughout; the npu run reduces gradients across two ranks where the CPU takes one batch's mean.
TOLERANCE = 1e-5
WORLD_SIZE = 2


def install():
    """The pinned DeepSpeed, unless it is installed already."""
    try:
        if importlib.metadata.version("deepspeed") == DEEPSPEED_VERSION:
            return
    except importlib.metadata.PackageNotFoundError:
        pass
    env = dict(os.environ, DS_BUILD_OPS="0", DS_ACCELERATOR="npu")
    # No build isolation: DeepSpeed's setup.py imports torch (and torch_npu, for its npu accelerator) from this venv.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    f"deepspeed=={DEEPSPEED_VERSION}", *LIGHT_DEPS], env=env, check=True)


def environment():
    env = dict(os.environ, DS_ACCELERATOR="npu", SOFTNPU_DEVICE_COUNT=str(WORLD_SIZE),
               # Op builders compile once per source change: a build directory that survives the run (torch's JIT
               # builder also compiles through ccache when it is installed).
               TORCH_EXTENSIONS_DIR=str(REPO / "build" / "torch_extensions"))
    return env


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def run_cpu_adam(timeout=900):
    proc = subprocess.run([sys.executable, str(HERE / "cpu_adam.py")], env=environment(), capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"cpu_adam.py failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return json_lines(proc.stdout)[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_zero(cases, timeout=900):
    """zero_train.py on WORLD_SIZE processes; rank 0's results, one per case."""
    port = free_port()
    procs = []
    for rank in range(WORLD_SIZE):
        env = dict(environment(), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE),
                   LOCAL_WORLD_SIZE=str(WORLD_SIZE), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(HERE / "zero_train.py"), *cases], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, (out, err) in zip(procs, outputs):
        if proc.returncode != 0:
            raise RuntimeError(f"zero_train.py failed (exit {proc.returncode}):\n{out[-4000:]}\n{err[-6000:]}")
    return json_lines(outputs[0][0])


def fused_adam_available():
    """DeepSpeed's FusedAdam on npu calls torch_npu.npu_apply_adam_w."""
    probe = subprocess.run([sys.executable, "-c", "import torch_npu; print(hasattr(torch_npu, 'npu_apply_adam_w'))"],
                           capture_output=True, text=True, env=environment())
    return probe.stdout.strip() == "True"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(ALL_CASES))
    parser.add_argument("--no-cpu-adam", action="store_true")
    args = parser.parse_args()
    install()
    failures = []
    if not args.no_cpu_adam:
        result = run_cpu_adam()
        print(json.dumps(result))
        if max(result["loss_diff"], result["param_diff"]) > TOLERANCE:
            failures.append("cpu_adam")
    cases = args.cases.split(",")
    if "fused_adam" in cases and not fused_adam_available():
        print("fused_adam: skipped, torch_npu.npu_apply_adam_w (DeepSpeed's FusedAdam on npu) is not available")
        cases.remove("fused_adam")
    for result in run_zero(cases) if cases else []:
        print(json.dumps(result))
        if result["steps"] == 0 or max(result["loss_diff"], result["param_diff"]) > TOLERANCE:
            failures.append(result["case"])
    if failures:
        sys.exit(f"differences from the CPU beyond {TOLERANCE}: {', '.join(failures)}")


if __name__ == "__main__":
    main()
