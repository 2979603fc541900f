"""The ``softnpu`` command.

    softnpu doctor                              check this installation: a line per check, exit status 0 if all pass
    softnpu report                              the configuration, versions and devices
    softnpu report --sync-points SCRIPT [ARGS]  run a Python script, then list the ops that synchronized with the
                                                device (host fallbacks) and how often
    softnpu estimate [OPTIONS] SCRIPT [ARGS]    run a Python script on fake npu tensors (no memory, no computation)
                                                and print its step's estimated time on the SoC (softnpu.cost)

Usage errors print the usage on stderr and exit with status 2.
"""

import argparse
import importlib.metadata
import json
import os
import platform
import re
import runpy
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import softnpu_loader
import torch

from . import __version__, _C, cann, host

_PACKAGE_DIR = Path(__file__).resolve().parent
_BIN_DIR = Path(sys.executable).parent
_README_HINT = "see Configuration in softnpu's README.md"


@dataclass(frozen=True)
class _Var:
    name: str
    layer: str
    kind: str
    default: str
    doc: str

    @property
    def value(self) -> str | None:
        """The value set in the environment; None when unset or empty (both mean the default), or set by softnpu's
        import (the CANN variables: softnpu.cann)."""
        return None if self.name in cann.SET_AT_IMPORT else os.environ.get(self.name) or None


def _env_table() -> list[_Var]:
    return [_Var(*row) for row in _C._env_table()]


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


# ---------------------------------------------------------------------------------------------------------- doctor


class _Failed(Exception):
    def __init__(self, detail: str, hint: str):
        super().__init__(detail)
        self.hint = hint


@dataclass(frozen=True)
class _Check:
    name: str
    run: Callable[[], str]  # returns what it found, or raises
    hint: str  # for an unexpected exception
    needs_runtime: bool = False


def _check_torch() -> str:
    # Under another torch softnpu does not import, and softnpu_loader.main reports this check's failure instead.
    error = softnpu_loader.torch_version_error(torch.__version__)
    if error is not None:
        raise _Failed(str(error), "fix this first: the other checks need softnpu to load")
    return f"torch {torch.__version__}; softnpu {__version__} was built for torch {softnpu_loader.TORCH_VERSION}"


# A fresh interpreter that imports torch alone: softnpu's entry point must have renamed PrivateUse1 to npu.
_AUTOLOAD_PROBE = "import torch; print(torch._C._get_privateuse1_backend_name())"


def _check_autoload() -> str:
    if not importlib.metadata.entry_points(group="torch.backends", name="softnpu"):
        raise _Failed("softnpu's torch.backends entry point is not installed", "reinstall softnpu (make build)")
    probe = subprocess.run([sys.executable, "-c", _AUTOLOAD_PROBE], capture_output=True, text=True, timeout=300)
    if probe.returncode == 0 and probe.stdout.strip() == "npu":
        return "`import torch` alone registers npu (torch.backends entry point softnpu)"
    said = (probe.stderr.strip().splitlines() or probe.stdout.strip().splitlines() or ["nothing"])[-1]
    if os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0":
        raise _Failed(f"`import torch` did not register npu: {said}",
                      "TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns the entry point off: unset it, or import torch_npu")
    raise _Failed(f"`import torch` did not register npu: {said}", "reinstall softnpu (make build)")


def _check_configuration() -> str:
    # Each step is where a layer reads its variables: the runtime when it starts, the caching allocator at the first
    # allocation, the cube's policy at the first matrix op, the op path at the first host fallback; torch_npu.testing's
    # when a test asks for its device and seed.
    from torch_npu.testing import common_utils

    common_utils.get_npu_device(), common_utils.test_seed()
    torch.npu.init()
    torch.empty(1, device="npu")
    host.half_compute()
    strict = False
    try:
        torch.nonzero(torch.ones(1, device="npu"))
    except RuntimeError as e:
        if "TORCH_NPU_FALLBACK_CPU_DISABLE=1" not in str(e):
            raise
        strict = True  # what the variable asks for, not a fault
    set_vars = [f"{v.name}={v.value}" for v in _env_table() if v.value is not None]
    found = "the runtime starts with " + (", ".join(set_vars) if set_vars else "the defaults (no variable set)")
    return found + ("; host fallbacks are errors (strict mode)" if strict else "")


def _check_devices() -> str:
    count = torch.npu.device_count()
    if count == 0:
        raise _Failed("no npu device", "check SOFTNPU_DEVICE_COUNT and ASCEND_RT_VISIBLE_DEVICES")
    devices = []
    for i in range(count):
        p = torch.npu.get_device_properties(i)
        threads = _C._get_device_properties(i)["compute_threads"]
        if p.total_memory <= 0 or threads <= 0:
            raise _Failed(f"npu:{i} has {p.total_memory} bytes and {threads} compute threads",
                          "check SOFTNPU_MEMORY_MB and SOFTNPU_CORES")
        devices.append(f"npu:{i} {_mib(p.total_memory)} {threads} compute threads")
    return f"{count} device{'s' if count > 1 else ''}: " + ", ".join(devices) + f"; {_presenting_as()}"


def _presenting_as() -> str:
    """What the devices are, plainly: software, presenting as the chip of the SoC profile."""
    soc = _C._soc_profile()
    return (f"SOFTWARE NPUs presenting as {soc['name']} (soc version {soc['soc_version']}, {soc['ai_cores']} AI cores; "
            "SOFTNPU_SOC_VERSION)")


def _check_op() -> str:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    expected = torch.softmax(a @ b, dim=1).sum(0)
    got = torch.softmax(a.npu() @ b.npu(), dim=1).sum(0).cpu()
    difference = (got - expected).abs().max().item()
    if not torch.allclose(got, expected, rtol=1e-4, atol=1e-5):
        raise _Failed(f"matmul + softmax on npu differs from the CPU by up to {difference:.3g}",
                      "a softnpu bug: please report it with the output of `softnpu report`")
    return f"matmul + softmax on npu:{torch.npu.current_device()} matches the CPU (difference {difference:.1g})"


def _check_npu_smi() -> str:
    ours = _BIN_DIR / "npu-smi"
    if not os.access(ours, os.X_OK):
        raise _Failed(f"{ours} is missing", "reinstall softnpu (make build)")
    found = shutil.which("npu-smi")
    activate = _BIN_DIR / "activate"
    path_hint = f"source {activate}" if activate.exists() else f"add {_BIN_DIR} to PATH"
    if found is None:
        raise _Failed(f"npu-smi is not on PATH (it is {ours})", path_hint)
    if Path(found).resolve() != ours.resolve():
        raise _Failed(f"PATH finds {found}, not softnpu's {ours}", f"put {_BIN_DIR} first on PATH ({path_hint})")
    torch.empty(1, device="npu")  # a process appears in npu-smi once it has used a device
    torch.npu.synchronize()
    info = subprocess.run([found, "info", "--json"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        raise _Failed(f"`npu-smi info` failed: {info.stderr.strip()}", "see the message")
    mine = [p for p in json.loads(info.stdout)["processes"] if p["pid"] == os.getpid()]
    if not mine:
        raise _Failed(f"npu-smi does not list this process (pid {os.getpid()})",
                      f"npu-smi reads /dev/shm/softnpu-stats.{os.getuid()}.<pid>: check that /dev/shm is writable")
    return f"{found} reads this process's statistics (pid {os.getpid()}, npu {mine[0]['device']})"


def _check_log_directory() -> str:
    if os.environ.get("ASCEND_SLOG_PRINT_TO_STDOUT") == "1":
        return "the runtime logs to stdout (ASCEND_SLOG_PRINT_TO_STDOUT=1)"
    # The runtime's choice (csrc/runtime/src/config.cpp): the variable, else $HOME/ascend/log.
    directory = Path(os.environ.get("ASCEND_PROCESS_LOG_PATH") or f"{os.environ.get('HOME', '/tmp')}/ascend/log")
    hint = "set ASCEND_PROCESS_LOG_PATH to a writable directory, or ASCEND_SLOG_PRINT_TO_STDOUT=1"
    existing = directory
    while not existing.exists():  # the runtime creates the missing part at its first log line
        existing = existing.parent
    if not existing.is_dir():
        raise _Failed(f"{existing} is not a directory (log directory {directory})", hint)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise _Failed(f"{existing} is not writable (log directory {directory})", hint)
    return f"{directory} is writable" + ("" if existing == directory else f" (to be created under {existing})")


def _check_half_precision() -> str:
    compute = host.half_compute()
    present = [name for name, has in host.features().items() if has]
    return (f"{host.cpu_model()} ({', '.join(present) if present else 'no native half-precision units'}): "
            + "; ".join(f"{dtype} {how}" for dtype, how in compute.items()))


_CHECKS = [
    _Check("torch", _check_torch, "reinstall softnpu (make build)"),
    _Check("autoload", _check_autoload, "reinstall softnpu (make build)"),
    _Check("configuration", _check_configuration, _README_HINT),
    _Check("devices", _check_devices, _README_HINT, needs_runtime=True),
    _Check("op", _check_op, "run it again with ASCEND_LAUNCH_BLOCKING=1", needs_runtime=True),
    _Check("half precision", _check_half_precision, _README_HINT, needs_runtime=True),
    _Check("npu-smi", _check_npu_smi, "reinstall softnpu (make build)", needs_runtime=True),
    _Check("log directory", _check_log_directory, "set ASCEND_PROCESS_LOG_PATH to a writable directory"),
]


def _malformed_hint(message: str) -> str | None:
    """For an error naming variables of the env table (NAME='value' is not valid), what to do about them."""
    names = [v.name for v in _env_table() if re.search(rf"\b{v.name}='", message)]
    return f"fix or unset {', '.join(names)} ({_README_HINT})" if names else None


def doctor() -> int:
    width = max(len(c.name) for c in _CHECKS)
    runtime_started = True
    failures = 0
    for check in _CHECKS:
        try:
            if check.needs_runtime and not runtime_started:
                raise _Failed("not checked: the runtime did not start", "fix the configuration first")
            ok, text = True, check.run()
        except Exception as e:  # every check reports, whatever the others do
            message = (str(e).strip().splitlines() or [type(e).__name__])[0]
            hint = e.hint if isinstance(e, _Failed) else _malformed_hint(message) or check.hint
            ok, text = False, f"{message} -- hint: {hint}"
        if check.name == "configuration":
            runtime_started = ok
        failures += not ok
        print(f"{'OK' if ok else 'FAIL':<5} {check.name:<{width}}  {text}", flush=True)
    print(f"softnpu doctor: {len(_CHECKS) - failures} of {len(_CHECKS)} checks passed")
    return 0 if failures == 0 else 1


# ---------------------------------------------------------------------------------------------------------- report


def report() -> int:
    print(f"softnpu {__version__}  {_PACKAGE_DIR}")
    print(f"torch   {torch.__version__}  (softnpu was built for {softnpu_loader.TORCH_VERSION})")
    print(f"python  {platform.python_version()}  {sys.executable}")
    print(f"host    {platform.platform()}, {os.cpu_count()} cores")
    features = host.features()
    print(f"cpu     {host.cpu_model()}; " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in features.items()))

    table = _env_table()
    width = max(len(v.name) for v in table)
    print("\nConfiguration (each variable as set in the environment, or its default)")
    for v in table:
        value, source = (v.value, "set") if v.value is not None else (v.default or '""', "default")
        print(f"  {v.name:<{width}}  {value:<16} {source:<8} {v.doc}")

    try:
        torch.npu.init()
    except RuntimeError as e:
        print(f"\nDevices: unavailable: {e}")
        return 1
    print("\nHalf precision (matrix and convolution ops)")
    for dtype, how in host.half_compute().items():
        print(f"  {dtype:<9} {how}")
    count = torch.npu.device_count()
    print(f"\nDevices: {count} {_presenting_as()}")
    for i in range(count):
        p = torch.npu.get_device_properties(i)
        threads = _C._get_device_properties(i)["compute_threads"]
        free, total = torch.npu.mem_get_info(i)
        print(f"  npu:{i}  {p.name}  physical {p.physical_index}  uuid {p.uuid}  "
              f"{threads} compute threads  memory {_mib(total)}: {_mib(free)} free, "
              f"{_mib(torch.npu.memory_allocated(i))} allocated, {_mib(torch.npu.memory_reserved(i))} reserved "
              "by this process")
    return 0


def report_sync_points(script: str, args: list[str]) -> int:
    """Runs `script` as `python SCRIPT ARGS` would, then prints the host fallbacks it took, most frequent first."""
    if not Path(script).is_file():
        print(f"softnpu: cannot open {script}: no such file", file=sys.stderr)
        return 2
    before = torch.npu.sync_points()["by_op"]
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).resolve().parent)
    status = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        status = 130  # the report still tells what ran until then
    except BaseException as e:
        # As Python prints it: from the script's first frame, without runpy's and this function's.
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        if tb is None and not isinstance(e, SyntaxError):  # raised before the script ran: all of it
            tb = e.__traceback__
        traceback.print_exception(type(e), e, tb)
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()

    counts = {op: n - before.get(op, 0) for op, n in torch.npu.sync_points()["by_op"].items()}
    counts = {op: n for op, n in counts.items() if n > 0}
    total = sum(counts.values())
    print(f"\nsoftnpu: {script} took {total} synchronizing host fallback{'' if total == 1 else 's'}"
          + (" (ops whose output shape depends on the data: each waits for the device)" if total else ""))
    for op, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        print(f"  {n:>8}  {op}")
    return status


# ------------------------------------------------------------------------------------------------------------ main


def _parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command's parser, and its report subcommand's."""
    parser = argparse.ArgumentParser(
        prog="softnpu", description="softnpu, a software NPU for PyTorch: check and describe this installation.")
    parser.add_argument("--version", action="version", version=f"softnpu {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("doctor", help="check this installation: one line per check; exit status 0 if all pass",
                        description="Check this installation: one line per check, OK or FAIL with a hint. Exit "
                                    "status 0 if every check passes, 1 otherwise.")
    report_parser = commands.add_parser(
        "report", help="print the configuration, versions and devices",
        description="Print the configuration (every variable softnpu reads), versions and devices.")
    report_parser.add_argument(
        "--sync-points", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]",
        help="instead, run a Python script with its arguments and then list the ops that took the synchronizing "
             "host fallback, with counts; the exit status is the script's")
    estimate_parser = commands.add_parser(
        "estimate", help="estimate a script's step on the SoC, running it on fake npu tensors",
        description="Run a Python script on fake npu tensors (shapes only: no memory, no computation) and print its "
                    "step's estimated time on the SoC: MFU, bound, op types. The step is the block the script marks "
                    "with softnpu.cost.step() (else everything it runs).")
    estimate_parser.add_argument("--soc", help="the SoC table row to estimate for (default: SOFTNPU_SOC_VERSION's)")
    estimate_parser.add_argument("--dp", type=int, default=1, help="data-parallel ranks (gradient all-reduce)")
    estimate_parser.add_argument("--tp", type=int, default=1,
                                 help="tensor-parallel ranks (the script's torch.distributed collectives)")
    estimate_parser.add_argument("--pp", type=int, default=1,
                                 help="pipeline-parallel stages (1F1B; the step is one micro-batch of the whole model, "
                                      "the boundary the tensor the script gives softnpu.cost.pipeline_boundary())")
    estimate_parser.add_argument("--micro-batches", type=int, default=1, help="micro-batches an iteration (with --pp)")
    estimate_parser.add_argument("--link", choices=("hccs", "roce"),
                                 help="the collectives' links (default: HCCS within its domain: an 8-NPU A2 server, an A3 "
                                      "supernode; else RoCE)")
    estimate_parser.add_argument("--graph", action="store_true",
                                 help="the step replays from a graph (no host launch cost per op)")
    estimate_parser.add_argument("script", metavar="SCRIPT")
    estimate_parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS")
    return parser, report_parser


def main(argv: list[str] | None = None) -> int:
    parser, report_parser = _parsers()
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return doctor()
    if args.command == "estimate":
        from .cost import script

        script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
        return script.run(args.script, script_args, soc=args.soc, dp=args.dp, tp=args.tp, pp=args.pp,
                          micro_batches=args.micro_batches, link=args.link, graph=args.graph)
    if args.sync_points is None:
        return report()
    if not args.sync_points:
        report_parser.error("--sync-points needs a SCRIPT")
    return report_sync_points(args.sync_points[0], args.sync_points[1:])


if __name__ == "__main__":
    sys.exit(main())
