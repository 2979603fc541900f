"""A seeded slice of the differential fuzzer (tests/fuzz_ops.py): ops of PyTorch's OpInfo database with mutated
sample inputs (zero-size, 0-dim, broadcast, strided and transposed views, other dtypes, extreme values) have the same
outcome on npu as on the CPU. `make fuzz` runs the fuzzer for FUZZ_MINUTES; this runs a fixed set of cases, in a
subprocess with a timeout (a crash or a hang is a failure), and fails on a disagreement, printing its minimal case."""

import subprocess
import sys
from pathlib import Path

from conftest import child_env

FUZZER = Path(__file__).resolve().parent / "fuzz_ops.py"

# Cases of the slice and its seed: about 20 s on 2 idle cores.
EXAMPLES = 200
SEED = 15

SLICE = f"""
import sys
sys.argv = ["fuzz_ops.py"]
sys.path.insert(0, {str(FUZZER.parent)!r})
import fuzz_ops
tally = fuzz_ops.fuzz(seconds=600, seed={SEED}, max_examples={EXAMPLES})
print(f"tried {{tally.tried}} found {{len(tally.found)}}")
sys.exit(1 if tally.found else 0)
"""


def test_seeded_fuzzing_finds_no_disagreement_with_the_cpu():
    out = subprocess.run([sys.executable, "-c", SLICE], capture_output=True, text=True, timeout=600,
                         env=child_env(), cwd=str(FUZZER.parent))
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    tried = int(out.stdout.split("tried ")[1].split()[0])
    assert tried >= EXAMPLES // 2, out.stdout  # the cases really ran (not all skipped)


def test_fuzzer_reports_a_planted_disagreement():
    # The comparison itself: a CPU result that differs from npu's must be found, shrunk and printed as a case.
    code = f"""
import sys
sys.path.insert(0, {str(FUZZER.parent)!r})
import fuzz_ops
real = fuzz_ops.runner._run
def skewed(fn, *, on_npu):
    out = real(fn, on_npu=on_npu)
    if not on_npu and isinstance(out, fuzz_ops.torch.Tensor) and out.is_floating_point() and out.numel() > 0:
        out = out + 1
    return out
fuzz_ops.runner._run = skewed
tally = fuzz_ops.fuzz(seconds=120, seed=1, ops=["abs"], max_examples=60)
print("found", len(tally.found))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=child_env(),
                         cwd=str(FUZZER.parent))
    assert out.returncode == 0, out.stderr[-3000:]
    # Found once per variant of abs (function, method, inplace): a disagreement retires its op and variant.
    assert "found 3" in out.stdout, out.stdout[-3000:]
    assert "DISAGREEMENT 1: output" in out.stdout and "replay: python tests/fuzz_ops.py --replay" in out.stdout
