"""``softnpu estimate SCRIPT``: a script run in an estimate context, and its step on the SoC printed."""

import runpy
import sys
import time
from pathlib import Path

from .estimator import estimate


def run(script: str, args: list[str], *, soc: str | None = None, dp: int = 1, tp: int = 1, pp: int = 1,
        micro_batches: int = 1, link: str | None = None, graph: bool = False, row_limit: int = 25) -> int:
    """Runs ``script`` as ``python SCRIPT ARGS`` would, on fake npu tensors, then prints the estimated step (the block
    the script marks with ``softnpu.cost.step()``, or everything it ran). Returns the exit status."""
    if not Path(script).is_file():
        print(f"softnpu: cannot open {script}: no such file", file=sys.stderr)
        return 2
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    start = time.perf_counter()
    with estimate(soc, dp=dp, tp=tp, pp=pp, micro_batches=micro_batches, link=link, graph=graph) as est:
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                return e.code if isinstance(e.code, int) else 1
    wall = time.perf_counter() - start
    layout = f"dp={dp} tp={tp} pp={pp} over {est.link.upper()}" if dp * tp * pp > 1 else "single device"
    print(f"softnpu estimate: {script} ({layout}), estimated in {wall:.1f} s on the host")
    print(est.result.table(row_limit))
    if est.sync_points:
        print(f"  {est.sync_points} host synchronization(s) (.item() and the like): values read as 0 here")
    return 0
