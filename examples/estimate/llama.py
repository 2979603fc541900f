"""A LLaMA training step (or decode step) as MindSpeed-LLM and MindIE run it on Ascend: torch_npu's fused RMSNorm,
rotary embedding and SwiGLU, flash attention; bfloat16 (training) or float16 (decode). Self-contained (no
transformers), so its shapes are exactly those of the configuration.

    softnpu estimate examples/estimate/llama.py                       # LLaMA-2-7B, 4096 tokens: fake tensors
    softnpu estimate --dp 8 examples/estimate/llama.py                # with data parallelism's gradient all-reduce
    softnpu estimate --tp 8 examples/estimate/llama.py -- --tp 8      # Megatron tensor parallelism over 8 ranks
    softnpu estimate --graph examples/estimate/llama.py -- --decode 8 --context 192  # a decode step, batch 8
    python examples/estimate/llama.py --size tiny                    # runs for real on softnpu (profile it)

With ``--tp N`` each rank holds 1/N of the heads and of the MLP (Megatron's column/row split) and all-reduces the
attention and MLP outputs, forward and backward, through torch.distributed (recorded by the estimator).
"""

import argparse
import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import softnpu  # noqa: F401  (registers npu and torch.ops.npu)
import softnpu.cost


@dataclass(frozen=True)
class Config:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int


CONFIGS = {
    "7b": Config(hidden=4096, layers=32, heads=32, ffn=11008, vocab=32000),  # LLaMA-2-7B (its config.json)
    "tiny": Config(hidden=256, layers=2, heads=4, ffn=688, vocab=1000),
}


class _AllReduce(torch.autograd.Function):
    """Megatron's row-parallel output: summed over the tensor-parallel ranks forward, passed through backward."""

    @staticmethod
    def forward(ctx, x):
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class _Copy(torch.autograd.Function):
    """Megatron's column-parallel input: identity forward, its gradient summed over the ranks backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        dist.all_reduce(grad)
        return grad


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return torch.ops.npu.npu_rms_norm(x, self.weight, 1e-6)[0]


class Block(nn.Module):
    def __init__(self, c: Config, tp: int):
        super().__init__()
        self.tp = tp
        self.heads = c.heads // tp
        self.head_dim = c.hidden // c.heads
        self.attn_norm = RMSNorm(c.hidden)
        self.qkv = nn.Linear(c.hidden, 3 * self.heads * self.head_dim, bias=False)
        self.out = nn.Linear(self.heads * self.head_dim, c.hidden, bias=False)
        self.mlp_norm = RMSNorm(c.hidden)
        self.gate_up = nn.Linear(c.hidden, 2 * c.ffn // tp, bias=False)
        self.down = nn.Linear(c.ffn // tp, c.hidden, bias=False)

    def _parallel_in(self, x):
        return _Copy.apply(x) if self.tp > 1 else x

    def _parallel_out(self, x):
        return _AllReduce.apply(x) if self.tp > 1 else x

    def forward(self, x, cos, sin, cache=None):
        b, s, _ = x.shape
        q, k, v = self.qkv(self._parallel_in(self.attn_norm(x))).view(b, s, 3, self.heads, self.head_dim).unbind(2)
        q = torch.ops.npu.npu_rotary_mul(q, cos, sin)
        k = torch.ops.npu.npu_rotary_mul(k, cos, sin)
        if cache is not None:  # decode: this step's key and value written into the cache's last slot
            cache[0][:, -s:] = k
            cache[1][:, -s:] = v
            k, v = cache
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=cache is None)
        x = x + self._parallel_out(self.out(attn.transpose(1, 2).reshape(b, s, -1)))
        h = torch.ops.npu.npu_swiglu(self.gate_up(self._parallel_in(self.mlp_norm(x))), -1)
        return x + self._parallel_out(self.down(h))


class Llama(nn.Module):
    def __init__(self, c: Config, tp: int = 1):
        super().__init__()
        self.config = c
        self.embed = nn.Embedding(c.vocab, c.hidden)
        self.blocks = nn.ModuleList(Block(c, tp) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden)
        self.head = nn.Linear(c.hidden, c.vocab, bias=False)

    def rotary(self, positions: torch.Tensor, dtype):
        d = self.config.hidden // self.config.heads
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=positions.device).float() / d))
        angles = torch.outer(positions.float(), inv)
        angles = torch.cat([angles, angles], dim=-1)[None, :, None, :]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, tokens, start: int = 0, caches=None):
        x = self.embed(tokens)
        cos, sin = self.rotary(torch.arange(start, start + tokens.shape[1], device=tokens.device), x.dtype)
        for i, block in enumerate(self.blocks):
            # Pipeline stages split between layers: the hidden states are what crosses (softnpu estimate --pp).
            x = softnpu.cost.pipeline_boundary(block(x, cos, sin, None if caches is None else caches[i]))
        return self.head(self.norm(x))


def micro_batch(model, batch: int, seq: int):
    """Forward and backward of one micro-batch (gradients accumulate)."""
    tokens = torch.randint(0, model.config.vocab, (batch, seq), device="npu")
    logits = model(tokens)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), tokens.view(-1))
    loss.backward()
    return loss


def optimizer_step(optimizer):
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@torch.no_grad()
def decode_step(model, caches, batch: int, context: int):
    """One token for each of ``batch`` sequences with ``context`` tokens in the KV cache: the new keys and values are
    written into the cache in place (as paged attention's reshape_and_cache does), attention reads all of it."""
    tokens = torch.randint(0, model.config.vocab, (batch, 1), device="npu")
    return model(tokens, start=context, caches=caches).argmax(-1)


def kv_caches(model, batch: int, context: int, dtype):
    c = model.config
    shape = (batch, context + 1, model.blocks[0].heads, c.hidden // c.heads)
    return [(torch.empty(shape, dtype=dtype, device="npu"), torch.empty(shape, dtype=dtype, device="npu"))
            for _ in range(c.layers)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(CONFIGS), default="7b")
    parser.add_argument("--batch", type=int, default=1, help="micro-batch size (training)")
    parser.add_argument("--seq", type=int, default=4096, help="sequence length (training)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks the model is split over")
    parser.add_argument("--decode", type=int, metavar="BATCH", help="a decode step of BATCH sequences instead")
    parser.add_argument("--context", type=int, default=192, help="tokens already in the KV cache (decode)")
    parser.add_argument("--phase", choices=("step", "micro-batch", "optimizer"), default="step",
                        help="what the marked step is: a training step (one micro-batch and the optimizer), or only "
                             "one of them (with gradient accumulation, the optimizer runs once per many micro-batches)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    config = CONFIGS[args.size]
    if args.decode:
        model = Llama(config, args.tp).to("npu", torch.float16)
        caches = kv_caches(model, args.decode, args.context, torch.float16)
        with softnpu.cost.step():
            return decode_step(model, caches, args.decode, args.context)
    model = Llama(config, args.tp).to("npu", torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    seq = args.seq if args.size == "7b" else min(args.seq, 128)
    micro_batch(model, args.batch, seq)
    optimizer_step(optimizer)  # the first step also creates the optimizer's state
    if args.phase == "optimizer":
        micro_batch(model, args.batch, seq)  # the gradients the optimizer applies
    with softnpu.cost.step():
        if args.phase != "optimizer":
            micro_batch(model, args.batch, seq)
        if args.phase != "micro-batch":
            optimizer_step(optimizer)


if __name__ == "__main__":
    main()
