"""MindSpeed's op builders against softnpu's torch_npu C++ API (issue 34 item 3; tests/clients/mindspeed_ops):
MindSpeed's MoeTokenPermute, MoeTokenUnpermute and RotaryPositionEmbedding builders compile their C++ against
torch_npu/include, link -ltorch_npu -lascendcl, and call aclnnMoeTokenPermute/Unpermute(+Grad) and
aclnnRotaryPositionEmbedding(+Grad) from libopapi.so through their ACLNN_CMD; run on npu, forward and backward equal
the CPU reference. MindSpeed is not on PyPI: MINDSPEED_SOURCE names a checkout or git clone of it (`make
mindspeed-ops MINDSPEED_SOURCE=...` also surveys every builder); without it these tests skip."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parent / "clients" / "mindspeed_ops" / "run.py"
SOURCE = os.environ.get("MINDSPEED_SOURCE")
# bfloat16 results (MindSpeed's MoE ops take bfloat16 only) against a float32 reference; float32 for the rotary op.
BF16_TOLERANCE = 1e-2
FP32_TOLERANCE = 1e-5

pytestmark = pytest.mark.skipif(not SOURCE, reason="MINDSPEED_SOURCE (a MindSpeed checkout or clone) is not set")


@pytest.fixture(scope="module")
def results():
    """The build-and-run cases, in a process of their own (the builders register ops in torch.ops.mindspeed)."""
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(RUN.parents[3] / "build" / "mindspeed" / "torch_extensions"))
    proc = subprocess.run([sys.executable, str(RUN), "--source", SOURCE, "--no-survey"], capture_output=True,
                          text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {r["case"].split(" ")[0]: r for r in map(json.loads, filter(None, proc.stdout.splitlines()))}


def test_moe_token_permute_and_unpermute_match_cpu(results):
    diffs = results["moe_token_permute+unpermute"]["rel_diff"]
    assert diffs["permuted"] == 0.0, diffs  # a row copy: exact
    assert max(diffs.values()) <= BF16_TOLERANCE, diffs


def test_rotary_position_embedding_matches_cpu(results):
    diffs = results["rotary_position_embedding"]["rel_diff"]
    assert max(diffs.values()) <= FP32_TOLERANCE, diffs
