"""Runs every ONNX node test case (test_all.py) and reports the pass rate (`make onnx-node-tests`).

    python tests/onnx_node/runner.py [--write-failures]

The cases run in one pytest process; a crash (a signal) stops it and is reported as such. With --write-failures, the
failing cases are appended to failures.txt with their first error line as the reason, to be reviewed by hand.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = pathlib.Path(__file__).resolve().parent


def failure_reason(message: str, text: str) -> str:
    """The line that says why: an unsupported node's reason from atc, else the error's first line."""
    for line in (message + "\n" + text).splitlines():
        m = re.match(r"^(?:E\s+)?\s+(\S+ \(\w+\): .+)$", line)
        if m:
            return m.group(1).strip()[:240]
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return (lines[0] if lines else "failed")[:240]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write-failures", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        xml = pathlib.Path(tmp) / "report.xml"
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE / "test_all.py"),
                               f"--junitxml={xml}", "-o", "junit_family=xunit1"], cwd=HERE.parent,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode < 0 or not xml.exists():
            print(proc.stdout[-4000:])
            print(f"CRASH: pytest died with signal {-proc.returncode}" if proc.returncode < 0 else "no report written")
            return 1
        cases = ET.parse(xml).getroot().iter("testcase")
        passed, xfailed, failed, skipped = [], [], {}, []
        for case in cases:
            name = case.get("name").removesuffix("_cpu")
            children = {c.tag: c for c in case}
            if "failure" in children or "error" in children:
                node = children.get("failure", children.get("error"))
                failed[name] = failure_reason(node.get("message") or "", node.text or "")
            elif "skipped" in children:
                (xfailed if "xfail" in (children["skipped"].get("type", "") + children["skipped"].get("message", ""))
                 else skipped).append(name)
            else:
                passed.append(name)
    total = len(passed) + len(xfailed) + len(failed)
    print(f"onnx node tests: {len(passed)} passed of {total} ({100.0 * len(passed) / max(total, 1):.1f} %), "
          f"{len(xfailed)} expected failures (failures.txt), {len(failed)} unexpected failures, 0 crashes")
    for name, reason in sorted(failed.items()):
        print(f"  FAILED {name}: {reason}")
    if args.write_failures and failed:
        with open(HERE / "failures.txt", "a") as f:
            for name, reason in sorted(failed.items()):
                f.write(f"{name}: {reason}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
