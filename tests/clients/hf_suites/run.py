"""Runs transformers' and diffusers' model test suites on the CPU and on npu, and compares them case by case.

As Ascend users run them: each device in its own pytest process, `TRANSFORMERS_TEST_DEVICE=npu` for transformers
(whose testing_utils then imports torch_npu), `DIFFUSERS_TEST_DEVICE=npu DIFFUSERS_TEST_BACKEND=torch_npu` for
diffusers. A case that passes on the CPU and fails on npu must be listed in expected_differences.toml with its
reason, and so must one the CPU skips (accelerator-only tests) that fails on npu; one listed there that passes on
npu is reported too, so the list stays true. The trees come from sources.py.

    python tests/clients/hf_suites/run.py [--suite transformers|diffusers] [-k EXPR] [--model llama ...]
    python tests/clients/hf_suites/run.py --suite diffusers --tree CHECKOUT --path tests/models/unets/...

`--tree` runs upstream's own test files from a checkout of the repository at the installed version's tag instead.
"""

import argparse
import os
import re
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import sources

EXPECTED = sources.HERE / "expected_differences.toml"
DEVICE_ENV = {
    "transformers": {"cpu": {"TRANSFORMERS_TEST_DEVICE": "cpu"}, "npu": {"TRANSFORMERS_TEST_DEVICE": "npu"}},
    "diffusers": {"cpu": {"DIFFUSERS_TEST_DEVICE": "cpu"},
                  "npu": {"DIFFUSERS_TEST_DEVICE": "npu", "DIFFUSERS_TEST_BACKEND": "torch_npu"}},
}


@dataclass
class Outcome:
    status: str  # passed, failed, skipped
    message: str = ""


def run_pytest(suite: str, device: str, root: Path, paths: list[str], keyword: str | None,
               deselect: list[str], timeout: float) -> dict[str, Outcome]:
    """Runs the suite's tests at `paths` (relative to `root`) on `device`; returns each case (`Class::test`) with its
    outcome."""
    report = sources.BUILD / f"report-{suite}-{device}.xml"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
               f"--junitxml={report}", "-o", "junit_family=xunit1"]
    selection = " and ".join([f"not ({test})" for test in deselect] + ([f"({keyword})"] if keyword else []))
    if selection:
        command += ["-k", selection]
    # No hub: the suites build their models from tiny configs, and nothing may wait on a network.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1", **DEVICE_ENV[suite][device]}
    if suite == "diffusers" and device == "cpu":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(sources.HERE), env.get("PYTHONPATH")]))
        command += ["-p", "cpu_baseline"]
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    if not report.exists():  # pytest crashed or never started
        raise RuntimeError(f"{suite} on {device}: pytest ended ({result.returncode}) without a report:\n"
                           f"{result.stdout[-4000:]}{result.stderr[-4000:]}")
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        key = f"{case.get('classname').rsplit('.', 1)[-1]}::{case.get('name')}"
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is not None:
            outcomes[key] = Outcome("failed", (problem.get("message") or "").strip())
        elif case.find("skipped") is not None:
            outcomes[key] = Outcome("skipped", (case.find("skipped").get("message") or "").strip())
        else:
            outcomes[key] = Outcome("passed")
    return outcomes


def load_expected(suite: str):
    data = tomllib.loads(EXPECTED.read_text())
    differences = [d for d in data.get("difference", []) if d["suite"] == suite]
    deselected = [d for d in data.get("deselect", []) if d["suite"] == suite]
    return differences, deselected


def compare(suite: str, cpu: dict[str, Outcome], npu: dict[str, Outcome], differences) -> list[str]:
    """The problems: cases failing on npu that the CPU passes or skips (the suites skip accelerator-only tests on
    the CPU: those run on npu alone) and that no entry explains, and entries that explain nothing because the case
    passes on npu. A case the CPU fails is the suite's or its tester's problem, not npu's."""
    problems = []
    for case, outcome in sorted(npu.items()):
        on_cpu = cpu.get(case)
        if on_cpu is None or on_cpu.status == "failed":
            continue
        reasons = [d for d in differences if re.search(d["case"], case)]
        if outcome.status == "failed" and not reasons:
            problems.append(f"{suite} {case}: {on_cpu.status} on the CPU, fails on npu: {outcome.message[:600]}")
        elif outcome.status == "passed" and reasons:
            problems.append(f"{suite} {case}: passes on npu, but expected_differences.toml says: "
                            f"{reasons[0]['reason']}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=sources.PACKAGES, action="append", help="default: both")
    parser.add_argument("--model", action="append", default=[], help="a model file's name (default: all)")
    parser.add_argument("-k", dest="keyword", help="pytest's -k expression")
    parser.add_argument("--tree", type=Path, help="a checkout of the suite's repository to run instead")
    parser.add_argument("--path", action="append", default=[], help="with --tree: a test file or folder in it")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for each pytest process")
    args = parser.parse_args(argv)
    problems = []
    for suite in args.suite or sources.PACKAGES:
        models = [m for m in args.model if (sources.HERE / f"{suite}_models" / f"{m}.py").exists()]
        if args.model and not models:
            continue
        if args.tree:
            root, paths = args.tree.resolve(), args.path or ["tests/models"]
        elif suite == "transformers":
            root, paths = sources.tree(suite), [f"tests/models/{m}" for m in models] or ["tests/models"]
        else:
            root, paths = sources.tree(suite), [f"tests/models/test_models_{m}.py" for m in models] or ["tests/models"]
        differences, deselected = load_expected(suite)
        deselect = [d["test"] for d in deselected]
        results = {}
        for device in ("cpu", "npu"):
            start = time.monotonic()
            results[device] = run_pytest(suite, device, root, paths, args.keyword, deselect, args.timeout)
            counts = {s: sum(o.status == s for o in results[device].values()) for s in ("passed", "failed", "skipped")}
            print(f"{suite} on {device}: {counts['passed']} passed, {counts['failed']} failed, "
                  f"{counts['skipped']} skipped ({time.monotonic() - start:.0f} s)", flush=True)
        cpu, npu = results["cpu"], results["npu"]
        npu_only_failures = [c for c, o in npu.items() if o.status == "failed"
                             and cpu.get(c, Outcome("failed")).status != "failed"]
        for entry in differences:
            cases = [c for c in npu_only_failures if re.search(entry["case"], c)]
            if cases:
                print(f"  expected on npu ({len(cases)}): {entry['reason']}")
        for case, outcome in npu.items():
            if outcome.status == "skipped" and cpu.get(case, Outcome("")).status == "passed":
                print(f"  skipped on npu only: {case}: {outcome.message[:200]}")
        problems += compare(suite, cpu, npu, differences)
    for problem in problems:
        print("UNEXPECTED:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
