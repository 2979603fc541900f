"""LLaMA-Factory's npu kernel plugins (issue 34 item 9): the pinned release from PyPI (installed --no-deps: its
kernel plugins need only transformers and torch_npu, and torch is never replaced) registers its npu kernels because
torch.accelerator reports npu; `apply_default_kernels(model, "auto")` patches a tiny Qwen3-MoE and a tiny LLaMA
(random weights) with torch_npu's fused RMSNorm, SwiGLU, rotary and MoE (token permute, grouped matmul, unpermute)
ops. Each fused op is seen at the dispatcher, and a forward and backward equals the same model on the CPU without
the plugins (loss and every gradient)."""
import importlib
import importlib.metadata
import subprocess
import sys

import pytest
import torch
import torch_npu  # noqa: F401  (LLaMA-Factory's kernels call torch_npu.npu_*)
from torch.utils._python_dispatch import TorchDispatchMode

LLAMAFACTORY_VERSION = "0.9.5"
# The kernels LLaMA-Factory registers for DeviceType.NPU (its cuda/triton kernels need triton: not registered).
NPU_KERNELS = {"npu_fused_rmsnorm", "npu_fused_swiglu", "npu_fused_moe", "npu_fused_rope"}
# Modeling modules whose apply_rotary_pos_emb the RoPE plugin replaces (a module-global patch, undone after).
PATCHED_MODULES = ["transformers.models.qwen3_moe.modeling_qwen3_moe", "transformers.models.llama.modeling_llama"]
TOLERANCE = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def interface():
    try:
        installed = importlib.metadata.version("llamafactory")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != LLAMAFACTORY_VERSION:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        f"llamafactory=={LLAMAFACTORY_VERSION}"], check=True)
        importlib.invalidate_caches()
    from llamafactory.v1.plugins.model_plugins.kernels import interface

    return interface


@pytest.fixture
def restore_rope():
    """The RoPE plugin replaces apply_rotary_pos_emb in transformers' modeling module: undone after each test."""
    saved = {name: importlib.import_module(name).apply_rotary_pos_emb for name in PATCHED_MODULES}
    yield
    for name, function in saved.items():
        sys.modules[name].apply_rotary_pos_emb = function


class OpCounter(TorchDispatchMode):
    """Counts the ops that reach the dispatcher (below autograd: forward and backward kernels alike)."""

    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def step_against_cpu(interface, model_class, config):
    """One forward and backward of the model on the CPU as transformers wrote it, then of the same weights on npu
    with LLaMA-Factory's npu kernels applied: losses and gradients compared; returns the npu step's op counts."""
    torch.manual_seed(0)
    cpu = model_class(config)
    npu = model_class(config)
    npu.load_state_dict(cpu.state_dict())
    ids = torch.randint(0, config.vocab_size, (2, 12))
    cpu_loss = cpu(input_ids=ids, labels=ids).loss
    cpu_loss.backward()

    npu = npu.npu()
    interface.apply_default_kernels(npu, "auto")
    with OpCounter() as counter:
        npu_loss = npu(input_ids=ids.npu(), labels=ids.npu()).loss
        npu_loss.backward()
    torch.testing.assert_close(npu_loss.cpu(), cpu_loss.detach(), **TOLERANCE)
    npu_params = dict(npu.named_parameters())
    for name, param in cpu.named_parameters():
        torch.testing.assert_close(npu_params[name].grad.cpu(), param.grad, **TOLERANCE, msg=name)
    return counter.counts


def test_npu_kernels_registered(interface):
    from llamafactory.v1.accelerator.helper import get_current_accelerator, is_torch_npu_available

    assert is_torch_npu_available() and get_current_accelerator().type == "npu"
    assert set(interface.get_default_kernels()) == NPU_KERNELS


def test_qwen3_moe_fused_kernels_match_cpu(interface, restore_rope):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    # Layer 0 dense (Qwen3MoeMLP: the SwiGLU plugin), layer 1 sparse (Qwen3MoeExperts: the fused MoE plugin).
    config = Qwen3MoeConfig(vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            num_experts=4, num_experts_per_tok=2, mlp_only_layers=[0], max_position_embeddings=64,
                            architectures=["Qwen3MoeForCausalLM"])
    counts = step_against_cpu(interface, Qwen3MoeForCausalLM, config)
    # 4 norms per layer (input, post-attention, q and k) and the final one; q and k rotated in each of 2 layers.
    assert counts.get("npu::npu_rms_norm") == 9 and counts.get("npu::npu_rms_norm_backward") == 9, counts
    assert counts.get("npu::npu_rotary_mul") == 4 and counts.get("npu::npu_rotary_mul_backward") == 4, counts
    # The dense layer's SwiGLU and the experts' SwiGLU between their two grouped matmuls.
    assert counts.get("npu::npu_swiglu") == 2 and counts.get("npu::npu_swiglu_backward") == 2, counts
    assert counts.get("npu::npu_moe_token_permute") == 1 and counts.get("npu::npu_moe_token_unpermute") == 1, counts
    assert counts.get("npu::npu_moe_token_permute_grad") == 1, counts
    assert counts.get("npu::npu_moe_token_unpermute_grad") == 1, counts
    # Two grouped matmuls forward, four backward (input and weight gradients of each).
    assert counts.get("npu::npu_grouped_matmul") == 6, counts


def test_llama_fused_kernels_match_cpu(interface, restore_rope):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         architectures=["LlamaForCausalLM"])
    counts = step_against_cpu(interface, LlamaForCausalLM, config)
    assert counts.get("npu::npu_rms_norm") == 5 and counts.get("npu::npu_rms_norm_backward") == 5, counts
    assert counts.get("npu::npu_rotary_mul") == 4 and counts.get("npu::npu_rotary_mul_backward") == 4, counts
    assert counts.get("npu::npu_swiglu") == 2 and counts.get("npu::npu_swiglu_backward") == 2, counts
    assert "npu::npu_grouped_matmul" not in counts  # a dense model: the MoE plugin has nothing to patch


def test_install_kept_torch(interface):
    assert importlib.metadata.version("llamafactory") == LLAMAFACTORY_VERSION
    assert importlib.metadata.version("torch").startswith("2.13.0"), "LLaMA-Factory's install must not replace torch"
