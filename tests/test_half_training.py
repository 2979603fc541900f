"""Training with the weights themselves in bfloat16 or float16 (no autocast) on npu, against the same training on the
CPU in the same dtype, from the same initial weights on the same data: transformers' GPT-2 and LLaMA (tiny
configurations, random weights) with AdamW, LoRA through peft over a bfloat16 LLaMA, a CNN with batch, instance and
layer norm in float16 with SGD and momentum, and FSDP2 with a bfloat16 MixedPrecisionPolicy on two processes (hccl on
npu against gloo on the CPU).
"""

import copy

import pytest
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from conftest import start_python
from test_distributed import GROUP_TIMEOUT, WORLD_SIZE

STEPS = 20
VOCAB, SEQ, BATCH = 96, 16, 4


def _token_batches():
    """Arithmetic progressions mod VOCAB, four batches cycled over the steps: learnable, so the losses fall and a
    divergence shows."""
    g = torch.Generator().manual_seed(1)
    start = torch.randint(0, VOCAB, (4, BATCH, 1), generator=g)
    stride = torch.randint(1, 4, (4, BATCH, 1), generator=g)
    ids = (start + stride * torch.arange(SEQ)) % VOCAB
    return [(ids[i % 4],) for i in range(STEPS)]


def _gpt2(dtype):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=VOCAB - 1,
                                     eos_token_id=VOCAB - 1)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)


def _llama(dtype, hidden=64):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=SEQ, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
                                      pad_token_id=0)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)


def _lm_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def _cpu(t):
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()


def _train(model, batches, make_optimizer, loss_of):
    """Trains `model` where its parameters are, one batch a step. Returns, read back to the CPU: each step's loss, the
    first step's gradients, and the final state (parameters and buffers)."""
    device = next(model.parameters()).device
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad])
    losses, first_grads = [], None
    for batch in batches:
        loss = loss_of(model, *(t.to(device) for t in batch))
        loss.backward()
        if first_grads is None:
            first_grads = {name: _cpu(p.grad) for name, p in model.named_parameters() if p.requires_grad}
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, first_grads, {name: _cpu(t) for name, t in model.state_dict().items()}


def _npu_and_cpu(model, batches, make_optimizer, loss_of):
    cpu = _train(copy.deepcopy(model).train(), batches, make_optimizer, loss_of)
    npu = _train(model.npu().train(), batches, make_optimizer, loss_of)
    return npu, cpu


# Tolerances. npu and the CPU round differently where softnpu computes in float32 (normalizations always; matrix and
# convolution ops where the host has no native unit for the dtype, see SOFTNPU_HALF_COMPUTE): each op's result then
# differs by up to half an ulp, and through the ops a gradient passes (forward and backward of two layers) these
# differences add up to a few eps (2^-7 for bfloat16, 2^-10 for float16) in norm. The figures measured below are the
# largest differences between npu and the CPU with SOFTNPU_HALF_COMPUTE=float32 (every op on the float32 route).


def _assert_close_in_norm(actual, expected, rtol, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    diff, norm = (actual.double() - expected.double()).norm().item(), expected.double().norm().item()
    # A zero expectation (LoRA's A before B has moved from zero) must be matched exactly.
    assert diff <= rtol * norm, (f"{what}: differs by {diff:.3g} in norm, {diff / norm if norm else float('inf'):.3g}"
                                 f" relative (tolerance {rtol:.3g}); expected norm {norm:.3g}")


def _assert_training_matches(npu, cpu, loss_rtol, grad_rtol, state_rtol=None, learned=0.5):
    """Every step's loss and every first-step gradient of the npu run against the CPU's; with state_rtol, the final
    parameters and buffers too, in norm."""
    (npu_losses, npu_grads, npu_state), (cpu_losses, cpu_grads, cpu_state) = npu, cpu
    assert cpu_losses[-1] < cpu_losses[0] - learned, f"the reference did not learn: {cpu_losses}"
    torch.testing.assert_close(torch.tensor(npu_losses), torch.tensor(cpu_losses), rtol=loss_rtol, atol=0,
                               msg=lambda m: f"losses: {m}\nnpu {npu_losses}\ncpu {cpu_losses}")
    assert npu_grads.keys() == cpu_grads.keys() and npu_state.keys() == cpu_state.keys()
    for name, grad in cpu_grads.items():
        _assert_close_in_norm(npu_grads[name], grad, grad_rtol, f"first-step gradient of {name}")
    if state_rtol is not None:
        for name, value in cpu_state.items():
            _assert_close_in_norm(npu_state[name], value, state_rtol, f"final {name}")


# bfloat16: each step's loss within one eps, 2^-7 (measured 1.7e-3); first-step gradients within 4 eps, 2^-5
# (measured 0.012). AdamW divides each gradient by its own running magnitude, so a small gradient's rounding difference
# becomes a difference of up to lr in the step: the weights drift apart by more than a step's rounding, but a step lost
# or misapplied would move them by far more.
BF16_LOSS, BF16_GRAD = 2**-7, 2**-5


def _adamw(lr):
    return lambda params: torch.optim.AdamW(params, lr=lr)


LM_BATCHES = _token_batches()


# ------------------------------------------------------------------------------------- transformers, bfloat16 weights


def test_gpt2_bf16_weights_adamw_matches_the_cpu():
    model = _gpt2(torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    npu, cpu = _npu_and_cpu(model, LM_BATCHES, _adamw(3e-3), _lm_loss)
    # No final-weights check: the key part of c_attn's bias has a gradient of zero in exact arithmetic (softmax does
    # not change when a query's scores all shift by q.b_k), so its gradient is rounding noise on either device, which
    # AdamW normalizes into steps of lr: those biases random-walk apart (0.9 in norm). The losses show the models
    # stay the same.
    _assert_training_matches(npu, cpu, BF16_LOSS, BF16_GRAD)


def test_llama_bf16_weights_adamw_matches_the_cpu():
    model = _llama(torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    npu, cpu = _npu_and_cpu(model, LM_BATCHES, _adamw(3e-3), _lm_loss)
    _assert_training_matches(npu, cpu, BF16_LOSS, BF16_GRAD, state_rtol=2**-4)  # measured 0.028


def test_lora_over_a_bf16_llama_matches_the_cpu():
    peft = pytest.importorskip("peft")
    base = _llama(torch.bfloat16)
    model = peft.get_peft_model(base, peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    trained = {name: p.dtype for name, p in model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in name for name in trained)
    # peft keeps the adapters in float32 over a bfloat16 base (its autocast_adapter_dtype).
    assert {p.dtype for p in model.parameters() if not p.requires_grad} == {torch.bfloat16}
    initial = {name: t.clone() for name, t in model.state_dict().items()}
    npu, cpu = _npu_and_cpu(model, LM_BATCHES, _adamw(1e-2), _lm_loss)
    # The adapters start at B = 0, so AdamW's drift (above) is large next to them: measured 0.075.
    _assert_training_matches(npu, cpu, BF16_LOSS, BF16_GRAD, state_rtol=2**-3, learned=0.2)
    for name, value in initial.items():  # the base stays as it was, bit for bit
        if "lora_" not in name:
            assert torch.equal(npu[2][name], value), name


# ------------------------------------------------------------------------------------------- a CNN, float16 weights


class _Cnn(nn.Module):
    """No bias before a norm (as in ResNet): the norm removes it, so its gradient would be rounding noise."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.InstanceNorm2d(16, affine=True), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.LayerNorm(16 * 4 * 4), nn.Linear(16 * 4 * 4, 10))

    def forward(self, x):
        return self.layers(x)


def _classify_loss(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def test_cnn_fp16_weights_sgd_matches_the_cpu():
    torch.manual_seed(0)
    model = _Cnn().half()
    assert {t.dtype for t in model.state_dict().values() if t.is_floating_point()} == {torch.float16}
    g = torch.Generator().manual_seed(2)
    labels = torch.randint(0, 10, (4, 8), generator=g)
    # Noise over a pattern of each class: learnable, so the losses fall and a divergence shows.
    images = (torch.randn(10, 3, 16, 16, generator=g)[labels] + torch.randn(4, 8, 3, 16, 16, generator=g)).half()
    batches = [(images[i % 4], labels[i % 4]) for i in range(STEPS)]
    npu, cpu = _npu_and_cpu(model, batches, lambda p: torch.optim.SGD(p, lr=2e-3, momentum=0.9), _classify_loss)
    # float16 (eps 2^-10): each step's loss within 2^-7 (measured 2.7e-3); first-step gradients within 4 eps, 2^-8
    # (measured 1.4e-3). SGD's step is proportional to the gradient, so the weights' drift stays small: 2^-5 (measured
    # 0.013, batch norm's bias, which starts at zero). The final state includes batch norm's running statistics.
    _assert_training_matches(npu, cpu, 2**-7, 2**-8, state_rtol=2**-5)


# ------------------------------------------------------------------------------- FSDP2 with bfloat16 mixed precision


def _fsdp2_run(rank, mesh):
    """FSDP2 over a float32 LLaMA computing in bfloat16, each rank training on its half of every batch."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = _llama(torch.float32, hidden=32)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    seen = set()  # what a projection computes with: its unsharded parameter, in bfloat16
    model.model.layers[0].self_attn.q_proj.register_forward_pre_hook(
        lambda module, args: seen.add(f"{module.weight.dtype} on {args[0].device.type}"))
    half = slice(rank * BATCH // 2, (rank + 1) * BATCH // 2)
    run = _train(model, [(ids[half],) for (ids,) in LM_BATCHES], _adamw(3e-3), _lm_loss)
    return {"run": run, "computed_in": sorted(seen),
            "sharded": sorted({f"{type(p).__name__} on {p.device.type}" for p in model.parameters()})}


def _fsdp2_worker(rank, out):
    """A rank of the FSDP2 comparison: the same training on npu (hccl) and on the CPU (gloo), in one group."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.npu.set_device(rank)
    dist.init_process_group("cpu:gloo,npu:hccl", init_method=f"file://{out}/store", rank=rank,
                            world_size=WORLD_SIZE, timeout=GROUP_TIMEOUT)
    try:
        results = {device: _fsdp2_run(rank, init_device_mesh(device, (WORLD_SIZE,))) for device in ("npu", "cpu")}
        dist.barrier()
    finally:
        dist.destroy_process_group()
    torch.save(results, f"{out}/rank{rank}.pt")


def test_fsdp2_bf16_mixed_precision_on_hccl_matches_gloo_on_the_cpu(tmp_path):
    workers = [start_python(f"import test_half_training; test_half_training._fsdp2_worker({rank}, {str(tmp_path)!r})",
                            timeout=240) for rank in range(WORLD_SIZE)]
    for worker in workers:
        worker.wait()
    for rank in range(WORLD_SIZE):
        results = torch.load(tmp_path / f"rank{rank}.pt")
        npu, cpu = results["npu"], results["cpu"]
        assert npu["computed_in"] == ["torch.bfloat16 on npu"] and cpu["computed_in"] == ["torch.bfloat16 on cpu"]
        assert npu["sharded"] == ["DTensor on npu"] and cpu["sharded"] == ["DTensor on cpu"]
        # float32 parameters and optimizer, bfloat16 compute and gradient reduction: bfloat16's tolerances, and
        # AdamW's drift on the float32 weights (measured 0.023).
        _assert_training_matches(npu["run"], cpu["run"], BF16_LOSS, BF16_GRAD, state_rtol=2**-4)
