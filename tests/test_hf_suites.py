"""A slice of transformers' and diffusers' model test suites on npu against the CPU (tests/clients/hf_suites;
`make hf-suites` runs every case): each transformers architecture's training, gradient checkpointing, save/reload,
attention, hidden-state and offloading tests, and all of diffusers' model checks, in the suites' own processes with
TRANSFORMERS_TEST_DEVICE / DIFFUSERS_TEST_DEVICE set."""
import re
import subprocess
import sys

import pytest

from conftest import REPO

HF_SUITES = REPO / "tests" / "clients" / "hf_suites"
sys.path.insert(0, str(HF_SUITES))
import run  # noqa: E402

SLICE = {
    "transformers": "test_training or test_save_load or test_attention_outputs or test_hidden_states_output "
                    "or test_cpu_offload or test_eager_matches_sdpa_inference_17_bf16_pad_left",
    "diffusers": None,  # all of its checks: two models, a minute
}


@pytest.mark.parametrize("suite", sorted(SLICE))
def test_slice(suite):
    selection = ["-k", SLICE[suite]] if SLICE[suite] else []
    result = subprocess.run([sys.executable, str(HF_SUITES / "run.py"), "--suite", suite, *selection],
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    # Both devices ran the slice's cases: a suite that collected nothing, or was skipped whole on npu, compares
    # nothing.
    ran = {}
    for device in ("cpu", "npu"):
        counts = re.search(rf"^{suite} on {device}: (\d+) passed, (\d+) failed", result.stdout, re.M)
        assert counts, result.stdout
        ran[device] = int(counts.group(1)) + int(counts.group(2))
    assert ran["npu"] >= ran["cpu"] >= 10, result.stdout


def test_compare_reports_npu_failures_and_stale_entries():
    cpu = {"A::test_x": run.Outcome("passed"), "A::test_y": run.Outcome("passed"), "A::test_z": run.Outcome("failed"),
           "A::test_accelerator": run.Outcome("skipped", "test requires accelerator")}
    npu = {"A::test_x": run.Outcome("failed", "boom"), "A::test_y": run.Outcome("passed"),
           "A::test_z": run.Outcome("failed"), "A::test_accelerator": run.Outcome("failed", "bang")}
    assert run.compare("s", cpu, npu, []) == ["s A::test_accelerator: skipped on the CPU, fails on npu: bang",
                                              "s A::test_x: passed on the CPU, fails on npu: boom"]
    explained = [{"case": "test_x|test_accelerator", "reason": "known"}]
    assert run.compare("s", cpu, npu, explained) == []
    stale = [{"case": "test_y|test_accelerator", "reason": "fixed since"}]
    assert run.compare("s", cpu, npu, stale) == [
        "s A::test_x: passed on the CPU, fails on npu: boom",
        "s A::test_y: passes on npu, but expected_differences.toml says: fixed since"]
