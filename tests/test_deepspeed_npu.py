"""DeepSpeed with DS_ACCELERATOR=npu (tests/clients/deepspeed_npu): ZeRO stages 1, 2 and 3 training on 2 processes
over the hccl backend, losses and parameters against the same data-parallel training on the CPU. The slice of
`make deepspeed-npu`, which also builds DeepSpeed's CPU Adam against torch_npu's headers and runs ZeRO-Offload."""
import importlib.util
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parent / "clients" / "deepspeed_npu" / "run.py"


@pytest.fixture(scope="module")
def deepspeed_run():
    spec = importlib.util.spec_from_file_location("deepspeed_npu_run", RUN)
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    run.install()
    return run


@pytest.fixture(scope="module")
def results(deepspeed_run):
    """Every case from one launch of the 2 ranks (starting them is most of the time)."""
    cases = ["zero1", "zero2", "zero3"] + (["fused_adam"] if deepspeed_run.fused_adam_available() else [])
    return {r["case"]: r for r in deepspeed_run.run_zero(cases)}


@pytest.mark.parametrize("case", ["zero1", "zero2", "zero3"])
def test_zero_stage_matches_cpu(deepspeed_run, results, case):
    result = results[case]
    assert result["steps"] == 4, case
    # The per-step loss is the ranks' mean all-reduced in float32 on npu (a float64 mean on the CPU).
    assert result["loss_diff"] <= deepspeed_run.TOLERANCE, result
    assert result["param_diff"] <= deepspeed_run.TOLERANCE, result
    assert result["npu_losses"][-1] < result["npu_losses"][0], result  # it trains


def test_fused_adam_matches_cpu(deepspeed_run, results):
    if "fused_adam" not in results:
        pytest.skip("DeepSpeed's FusedAdam on npu calls torch_npu.npu_apply_adam_w, which softnpu does not have")
    assert results["fused_adam"]["param_diff"] <= deepspeed_run.TOLERANCE, results["fused_adam"]


def test_install_kept_torch(deepspeed_run):
    import importlib.metadata

    assert importlib.metadata.version("deepspeed") == deepspeed_run.DEEPSPEED_VERSION
    assert importlib.metadata.version("torch").startswith("2.13.0"), "DeepSpeed's install must not replace torch"
    assert sys.modules.get("deepspeed") is None  # installed and run in child processes only
