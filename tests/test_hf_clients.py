"""HuggingFace transformers and accelerate on npu, run as their users run them (tests/clients/ holds the scripts).

Each configuration runs in a child process, as the Trainer and accelerate choose their device once per process;
CPU runs of the same scripts are the reference.
"""

import json
import subprocess
import sys

import pytest

from conftest import REPO, child_env, run_python

CLIENTS = REPO / "tests" / "clients"
BIN = REPO / ".venv" / "bin"
RUNS = {
    "fp32": "fp32:adamw_torch:eager",
    "fp16": "fp16:adamw_torch:eager",
    "bf16": "bf16:adamw_torch:eager",
    "fused": "fp32:adamw_torch_npu_fused:eager",
    "flash": "bf16:adamw_torch:flash_attention_2",
}


def run_script(*argv, timeout=600):
    proc = subprocess.run([*argv], capture_output=True, text=True, timeout=timeout, env=child_env())
    assert proc.returncode == 0, f"{argv} failed\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cpu():
    return run_script(sys.executable, CLIENTS / "hf_trainer.py", "--device", "cpu", "--run", RUNS["fp32"],
                      "--generate")


@pytest.fixture(scope="module")
def npu():
    runs = [arg for spec in RUNS.values() for arg in ("--run", spec)]
    return run_script(sys.executable, CLIENTS / "hf_trainer.py", "--device", "npu", *runs, "--generate",
                      "--attention")


def assert_close(actual, expected, atol):
    assert len(actual) == len(expected) == 30
    worst = max(abs(a - b) for a, b in zip(actual, expected))
    assert worst <= atol, f"losses differ by up to {worst}:\n{actual}\n{expected}"


def test_model_imports_with_softnpu_installed():
    r = run_python(
        "from transformers import GPT2LMHeadModel, BertModel\n"
        "from transformers.utils import is_torch_npu_available\n"
        "from transformers.integrations.npu_flash_attention import npu_flash_attn_func\n"
        "print(is_torch_npu_available())")
    assert r.lines[-1] == "True"


def test_trainer_picks_npu_and_matches_the_cpu_in_fp32(npu, cpu):
    run = npu[RUNS["fp32"]]
    assert run["device"] == run["param_device"] == "npu:0"
    assert_close(run["losses"], cpu[RUNS["fp32"]]["losses"], atol=1e-4)
    assert run["losses"][-1] < run["losses"][0] - 0.5, "the model did not learn"


@pytest.mark.parametrize("precision, atol", [("fp16", 2e-2), ("bf16", 5e-2)])
def test_trainer_mixed_precision(npu, cpu, precision, atol):
    run = npu[RUNS[precision]]
    assert run["scaler"] == ("GradScaler" if precision == "fp16" else None)
    assert_close(run["losses"], cpu[RUNS["fp32"]]["losses"], atol=atol)


def test_trainer_with_torch_npu_fused_adamw(npu):
    run = npu[RUNS["fused"]]
    assert run["optimizer"] == "softnpu.optim.NpuFusedAdamW"  # torch_npu.optim is softnpu.optim
    assert_close(run["losses"], npu[RUNS["fp32"]]["losses"], atol=1e-4)


def test_flash_attention_2_through_npu_fusion_attention(npu):
    assert npu["attention"]["logits"] < 5e-2 and npu["attention"]["grad"] < 1e-3, npu["attention"]
    assert_close(npu[RUNS["flash"]]["losses"], npu[RUNS["bf16"]]["losses"], atol=2e-2)


def test_generate_matches_the_cpu(npu, cpu):
    assert npu["generate"]["device"] == "npu:0"
    assert npu["generate"]["tokens"] == cpu["generate"]["tokens"]


def test_accelerate_launch_evaluates_under_ddp():
    launch = [BIN / "accelerate", "launch", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
              "--dynamo_backend", "no"]
    script = CLIENTS / "accelerate_eval.py"
    # accelerate launch has no multi-process CPU mode of its own; torchrun is what it runs under the hood.
    reference = run_script(BIN / "torchrun", "--nproc_per_node", "2", script, "--cpu")
    assert (reference["processes"], reference["backend"]) == (2, "gloo")
    ddp = run_script(*launch, script)
    assert (ddp["processes"], ddp["distributed_type"], ddp["backend"]) == (2, "DistributedType.MULTI_NPU", "hccl")
    assert ddp["device"] == "npu:0"
    assert ddp["rank_rows"] == [[0.0] * 3] * 2 + [[1.0] * 3] * 2
    assert ddp["predictions"] == reference["predictions"]
    assert ddp["losses"] == pytest.approx(reference["losses"], abs=1e-5)
    assert ddp["eval_loss"] == pytest.approx(reference["eval_loss"], abs=1e-5)
