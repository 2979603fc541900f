"""Runs torch_npu's own public tests (the test/ directory of Ascend/pytorch) on softnpu, unchanged, and compares the
outcome of every test with expectations.toml.

torch_npu's tests are not on PyPI, so they are read from a source the caller gives (CI has PyPI and Debian only):
  --source DIR   an Ascend/pytorch checkout (DIR/test), or its git directory (a clone or mirror: the pinned commit's
                 test/ is extracted with `git archive`).
Each test file runs in a process of its own under pytest (torch_npu's developers run `python test_x.py`, the same
unittest cases), from a copy of test/, so `import torch_npu` is softnpu's and never the source tree's.

  python tests/torch_npu_suite/run.py --source /path/to/pytorch [--files 'npu/test_stream.py' ...] [-j 2]

Prints passed / failed / needs-silicon counts, each test whose outcome differs from expectations.toml, and exits
non-zero if any does (a listed failure that passes now is reported too, so the list only shrinks). Tests listed as
needing silicon by name are not run (they cannot pass here; some would exhaust the host or wait for a hardware fault).
"""

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPECTATIONS = HERE / "expectations.toml"


def load_expectations(path: Path = EXPECTATIONS) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def test_tree(source: Path, commit: str, workdir: Path) -> Path:
    """A directory holding torch_npu's test/ (copied, so the run never writes into the source)."""
    if (source / "test").is_dir():
        shutil.copytree(source / "test", workdir / "test", symlinks=True)
    elif (source / "HEAD").exists() or (source / ".git").exists():
        archive = subprocess.run(["git", "--git-dir", str(source / ".git" if (source / ".git").exists() else source),
                                  "archive", "--format=tar", commit, "test"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive, check=True)
    else:
        sys.exit(f"--source {source}: neither a checkout with test/ nor a git directory")
    acl_tree(source, commit, workdir)
    return workdir / "test"


def acl_tree(source: Path, commit: str, workdir: Path) -> None:
    """The source tree's third_party/acl (libs/ and inc/) beside test/: the C++ extension tests run libs/build_stub.sh
    and link -lascendcl from there, as torch_npu's developers run them from a checkout. ACL's own headers are not in
    the checkout (CANN's), so softnpu's installed ones go where the stubs look for them (inc/acl)."""
    parts = ["third_party/acl/libs", "third_party/acl/inc"]
    if (source / "test").is_dir():
        for part in parts:
            if (source / part).is_dir():
                shutil.copytree(source / part, workdir / part, symlinks=True)
    else:
        git_dir = str(source / ".git" if (source / ".git").exists() else source)
        archive = subprocess.run(["git", "--git-dir", git_dir, "archive", "--format=tar", commit, *parts],
                                 capture_output=True)
        if archive.returncode != 0:
            return
        subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive.stdout, check=True)
    inc = workdir / "third_party/acl/inc"
    installed = Path(subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                                     "print(u.find_spec('torch_npu').submodule_search_locations[0])"],
                                    capture_output=True, text=True, check=True).stdout.strip())
    acl_headers = installed / "include/third_party/acl/inc/acl"
    if inc.is_dir() and not (inc / "acl").exists() and acl_headers.is_dir():
        shutil.copytree(acl_headers, inc / "acl")


def select_files(tests: Path, patterns: list[str]) -> list[str]:
    files = sorted(str(p.relative_to(tests)) for p in tests.rglob("test_*.py"))
    return [f for f in files if any(fnmatch.fnmatch(f, pat) for pat in patterns)]


def silicon_only(rel: str, expectations: dict) -> list[str]:
    """The tests of file `rel` listed as needing silicon by name (not by a glob): they are not run, since they cannot
    pass here and some cost what this host cannot give (tens of GiB of device memory, a hardware fault awaited until
    the timeout)."""
    return [test for entry in expectations.get("needs_silicon", []) for test in entry["tests"]
            if (test == rel or test.startswith(rel + "::")) and not any(c in test for c in "*?[")]


def run_file(tests: Path, rel: str, timeout: int, python: str, expectations: dict) -> dict:
    """{test id: (outcome, message)} for one file; outcome is passed, failed, skipped, error (the whole file
    when it cannot be collected, crashes or times out), or not_run (a test that needs silicon)."""
    not_run = silicon_only(rel, expectations)
    if rel in not_run:
        return {"file": rel, "seconds": 0, "results": {rel: ("not_run", "needs silicon")}}
    xml = Path(tempfile.mkstemp(suffix=".xml")[1])
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    cmd = [python, "-m", "pytest", rel, "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", "-o",
           "junit_family=xunit1", *(f"--deselect={test}" for test in not_run)]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=tests, env=env, capture_output=True, text=True, timeout=timeout)
        tail = (proc.stdout + proc.stderr)[-3000:]
    except subprocess.TimeoutExpired:
        return {"file": rel, "seconds": timeout, "results": {rel: ("error", f"timed out after {timeout} s")}}
    results = {}
    try:
        root = ET.parse(xml).getroot()
    except (ET.ParseError, FileNotFoundError):
        root = None
    finally:
        xml.unlink(missing_ok=True)
    for case in (root.iter("testcase") if root is not None else ()):
        name = f"{rel}::{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (node.get("message") or node.text or "").strip().splitlines()[:1]
                message = message[0][:300] if message else ""
                break
        if outcome == "error" and name in results:  # an error in teardown after the test ran
            continue
        results[name] = (outcome, message)
    if not results and proc.returncode == 5:  # pytest: nothing collected (the file's tests run only as a script)
        return {"file": rel, "seconds": round(time.monotonic() - start, 1),
                "results": {rel: ("skipped", "pytest collected no tests")}}
    if not results or (proc.returncode not in (0, 1) and not any(o == "passed" for o, _ in results.values())):
        last = [line for line in tail.splitlines() if line.strip()][-1:] or [f"exit status {proc.returncode}"]
        results = {rel: ("error", last[0][:300])}
    results.update({test: ("not_run", "needs silicon") for test in not_run})
    return {"file": rel, "seconds": round(time.monotonic() - start, 1), "results": results}


def expected_outcome(test: str, expectations: dict) -> tuple[str, str]:
    """("passed", "") or (kind, why) for the list that names the test or its file (needs_silicon, fails or flaky)."""
    for kind in ("needs_silicon", "fails", "flaky"):
        for entry in expectations.get(kind, []):
            for pattern in entry["tests"]:
                if test == pattern or fnmatch.fnmatch(test, pattern) or test.startswith(pattern + "::"):
                    return kind, entry["why"]
    return "passed", ""


def main() -> int:
    expectations = load_expectations()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, required=True, help="Ascend/pytorch checkout or git directory")
    parser.add_argument("--commit", default=expectations["commit"], help="commit to extract from a git directory")
    parser.add_argument("--files", nargs="*", default=expectations["files"], help="globs under test/")
    parser.add_argument("-j", type=int, default=2, help="files run at once")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per file")
    parser.add_argument("--json", type=Path, help="write every test's outcome here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="torch_npu_tests_") as tmp:
        tests = test_tree(args.source.resolve(), args.commit, Path(tmp))
        files = select_files(tests, args.files)
        print(f"{len(files)} files of torch_npu's test/ ({args.commit[:12]}), {args.j} at a time", flush=True)
        outcomes = {}
        with ThreadPoolExecutor(args.j) as pool:
            for done in pool.map(lambda f: run_file(tests, f, args.timeout, sys.executable, expectations), files):
                counts = {}
                for outcome, _ in done["results"].values():
                    counts[outcome] = counts.get(outcome, 0) + 1
                print(f"  {done['file']}: {counts} ({done['seconds']} s)", flush=True)
                outcomes.update(done["results"])

    summary = {"passed": 0, "failed": 0, "needs_silicon": 0, "skipped": 0}
    surprises = []
    for test, (outcome, message) in sorted(outcomes.items()):
        kind, why = expected_outcome(test, expectations)
        if outcome == "skipped":
            summary["skipped"] += 1
        elif outcome == "not_run":
            summary["needs_silicon"] += 1
        elif outcome == "passed":
            summary["passed"] += 1
            if kind not in ("passed", "flaky"):
                surprises.append(f"PASSES NOW (listed as {kind}: {why}): {test}")
        else:
            summary["needs_silicon" if kind == "needs_silicon" else "failed"] += 1
            # A flaky test may fail; it may not crash or stop importing.
            if kind == "passed" or (kind == "flaky" and outcome != "failed"):
                surprises.append(f"FAILS ({outcome}: {message}): {test}")
    if args.json:
        args.json.write_text(json.dumps({t: list(v) for t, v in sorted(outcomes.items())}, indent=1))
    print("\n".join(surprises))
    print(f"torch_npu's tests: {summary['passed']} passed, {summary['failed']} failed, {summary['needs_silicon']} "
          f"need silicon, {summary['skipped']} skipped by the tests themselves; {len(surprises)} differ from "
          f"{EXPECTATIONS.name}")
    return 1 if surprises else 0


if __name__ == "__main__":
    sys.exit(main())
