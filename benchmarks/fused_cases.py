"""Fused-op rows (kind "fused"): each torch_npu fused op against the composite of ATen ops it replaces, both eager on
npu in the same run (fused/composite: below 1 the fused op is faster). The composites are the eager fallbacks the
client libraries run without the fused op (MindSpeed-MM's eager_permute, Megatron's rotate_half, torch.optim's
single-tensor AdamW step, ...)."""

import torch
import torch_npu

NPU = "npu:0"


def _pair(make, fused, composite):
    def run_with(op):
        args = make(NPU)

        def run(n: int) -> None:
            for _ in range(n):
                op(*args)

        return run

    return {"fused": (NPU, run_with(fused), False), "composite": (NPU, run_with(composite), False)}


# grouped matmul: 8 experts, 4096 routed tokens, hidden 256 -> ffn 512. The composite is Megatron-core's SequentialMLP
# (megatron/core/transformer/moe/experts.py, the expert layer without moe_grouped_gemm): the token counts read to the
# host (tokens_per_expert.tolist()), the tokens split by them, one matmul per expert (here against the same [K, N]
# weights the fused op takes), the outputs concatenated.
COUNTS = [700, 300, 512, 0, 1024, 260, 800, 500]


def _gmm_make(d):
    return torch.randn(4096, 256, device=d), torch.randn(8, 256, 512, device=d), torch.tensor(COUNTS, device=d)


def _gmm_fused(x, w, group_list):
    return torch_npu.npu_grouped_matmul([x], [w], group_list=group_list, split_item=3, group_type=0,
                                        group_list_type=1)


def _gmm_composite(x, w, group_list):
    return torch.cat([x_g @ w[g] for g, x_g in enumerate(x.split(group_list.tolist()))])


# The expert layer of a real MoE (8 experts, 4096 routed tokens, hidden 1024 -> ffn 2816, bfloat16), forward and
# forward + backward (the fused backward is the same op on the transposed operands, without the composite's
# concatenation of the per-expert results and gradients).
def _gmm_bf16_make(d):
    torch.manual_seed(0)
    return (torch.randn(4096, 1024, device=d, dtype=torch.bfloat16),
            (torch.randn(8, 1024, 2816, device=d) * 0.02).to(torch.bfloat16), torch.tensor(COUNTS, device=d))


def _gmm_train_make(d):
    x, w, gl = _gmm_bf16_make(d)
    return x.requires_grad_(), w.requires_grad_(), gl, torch.randn(4096, 2816, device=d, dtype=torch.bfloat16)


def _gmm_train_fused(x, w, gl, dy):
    _gmm_fused(x, w, gl)[0].backward(dy)


def _gmm_train_composite(x, w, gl, dy):
    _gmm_composite(x, w, gl).backward(dy)


# vLLM-Ascend's MoE dispatch: 4096 tokens x 1024 (bfloat16), top-8 of 64 experts; the composite is what a model
# without the fused op runs, DeepSeek-V3's moe_infer (modeling_deepseek.py: argsort of the flattened experts,
# x[idxs // topk], the tokens per expert), with the inverse permutation torch_npu's op also returns.
def _routing_make(d):
    torch.manual_seed(0)
    return (torch.randn(4096, 1024, device=d, dtype=torch.bfloat16),
            torch.randint(0, 64, (4096, 8), device=d, dtype=torch.int32))


def _routing_fused(x, idx):
    return torch_npu.npu_moe_init_routing_v2(x, idx, active_num=4096 * 8, expert_num=64, expert_tokens_num_type=1,
                                             expert_tokens_num_flag=True, active_expert_range=[0, 64])


def _routing_composite(x, idx):
    flat = idx.view(-1)
    order = torch.argsort(flat, stable=True)
    return (x.index_select(0, order // 8), torch.argsort(order).int(), torch.bincount(flat, minlength=64))


def _permute_make(d):
    torch.manual_seed(0)
    return torch.randn(4096, 1024, device=d), torch.randint(0, 8, (4096, 2), device=d)


def _permute_composite(tokens, indices):  # MindSpeed-MM's eager_permute
    order = torch.argsort(indices.view(-1), stable=True)
    return tokens.index_select(0, order // 2), torch.argsort(order, stable=True).int()


def _unpermute_make(d):
    tokens, indices = _permute_make(d)
    permuted, sorted_indices = torch_npu.npu_moe_token_permute(tokens, indices)
    return permuted, sorted_indices, torch.rand(4096, 2, device=d)


def _unpermute_composite(permuted, sorted_indices, probs):
    rows = permuted.index_select(0, sorted_indices.long()).view(-1, 2, permuted.shape[1])
    return (rows * probs.unsqueeze(-1)).sum(1)


def _add_rms_norm_make(d):
    return (torch.randn(2048, 2048, device=d, dtype=torch.bfloat16),
            torch.randn(2048, 2048, device=d, dtype=torch.bfloat16), torch.randn(2048, device=d, dtype=torch.bfloat16))


def _add_rms_norm_composite(x1, x2, gamma):
    x = x1 + x2
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd, x


def _rope_make(d):
    return (torch.randn(4, 512, 8, 128, device=d, dtype=torch.bfloat16),
            torch.randn(1, 512, 1, 128, device=d, dtype=torch.bfloat16),
            torch.randn(1, 512, 1, 128, device=d, dtype=torch.bfloat16))


def _rotate_half(x):
    a, b = x.chunk(2, -1)
    return torch.cat((-b, a), -1)


def _rope_composite(x, cos, sin):
    return x * cos + _rotate_half(x) * sin


def _apply_rope_make(d):
    x, cos, sin = _rope_make(d)
    return x, x[:, :, :2].contiguous(), cos, sin


def _apply_rope_fused(q, k, cos, sin):
    return torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin)


def _apply_rope_composite(q, k, cos, sin):
    q.copy_(_rope_composite(q, cos, sin))
    k.copy_(_rope_composite(k, cos, sin))


# RMSNorm at LLaMA's hidden size (2048 tokens x 4096); the composite is transformers' LlamaRMSNorm. The training rows
# time forward and backward (the gradient of the input and of the weight), the composite's through autograd.
def _rms_norm_make(d, dtype=torch.bfloat16):
    return torch.randn(2048, 4096, device=d, dtype=dtype), torch.randn(4096, device=d, dtype=dtype)


def _rms_norm_composite(x, gamma):  # LlamaRMSNorm.forward
    xf = x.float()
    return gamma * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _rms_norm_train_make(d):
    x, gamma = _rms_norm_make(d)
    return x.requires_grad_(), gamma.requires_grad_(), torch.randn_like(x)


def _add_rms_norm_train_make(d):
    x1, gamma = _rms_norm_make(d)
    return x1.requires_grad_(), torch.randn_like(x1).requires_grad_(), gamma.requires_grad_(), torch.randn_like(x1)


def _add_rms_norm_train_fused(x1, x2, gamma, dy):
    torch_npu.npu_add_rms_norm(x1, x2, gamma)[0].backward(dy)


def _add_rms_norm_train_composite(x1, x2, gamma, dy):
    _rms_norm_composite(x1 + x2, gamma).backward(dy)


def _rope_f32_make(d):
    return tuple(t.float() for t in _rope_make(d))


def _rope_train_make(d):
    x, cos, sin = _rope_make(d)
    return x.requires_grad_(), cos, sin, torch.randn_like(x)


def _rope_train_fused(x, cos, sin, dy):
    torch_npu.npu_rotary_position_embedding(x, cos, sin, 0).backward(dy)


def _rotary_mul_train_fused(x, cos, sin, dy):
    torch_npu.npu_rotary_mul(x, cos, sin).backward(dy)


def _rope_train_composite(x, cos, sin, dy):
    _rope_composite(x, cos, sin).backward(dy)


# AdamW over all parameters: 24 tensors, 6.3M elements (a small model), one step each.
SIZES = [(512, 512)] * 16 + [(2048, 512)] * 4 + [(512,)] * 4


def _adam_make(d):
    params = [torch.randn(s, device=d) for s in SIZES]
    return params, [torch.randn(s, device=d) for s in SIZES], [torch.zeros(s, device=d) for s in SIZES], \
        [torch.zeros(s, device=d) for s in SIZES]


def _adam_fused(params, grads, ms, vs):
    for p, g, m, v in zip(params, grads, ms, vs):
        torch_npu.npu_apply_adam_w(0.9, 0.999, 1e-3, 0.01, 0.9, 0.999, 1e-8, g, None, False, False, out=(p, m, v))


def _adam_composite(params, grads, ms, vs):  # torch.optim.AdamW's single-tensor step
    for p, g, m, v in zip(params, grads, ms, vs):
        p.mul_(1 - 1e-3 * 0.01)
        m.lerp_(g, 0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        denom = (v.sqrt() / (1 - 0.999) ** 0.5).add_(1e-8)
        p.addcdiv_(m, denom, value=-1e-3 / (1 - 0.9))


def _gelu_make(d):
    return (torch.randn(1 << 22, device=d),)


# W8A8 dynamic linear (vLLM-Ascend's): the activation quantized per token, int8 x int8 with per-channel and per-token
# scales; the composite quantizes and multiplies in float32.
def _w8a8_make(d):
    return (torch.randn(64, 2048, device=d, dtype=torch.bfloat16),
            torch.randint(-128, 128, (2048, 2048), device=d, dtype=torch.int8), torch.rand(2048, device=d) * 0.01)


def _w8a8_fused(x, w, scale):
    q, pertoken = torch_npu.npu_dynamic_quant(x)
    return torch_npu.npu_quant_matmul(q, w, scale, pertoken_scale=pertoken, output_dtype=torch.bfloat16)


def _w8a8_composite(x, w, scale):
    xf = x.float()
    pertoken = xf.abs().amax(-1, keepdim=True) / 127
    q = torch.round(xf / pertoken).clamp(-128, 127)
    return ((q @ w.float()) * scale * pertoken).to(torch.bfloat16)


# W4A16 per-group linear (torchao's int4 weight-only on npu): the composite unpacks the same int4-in-int32 weight,
# dequantizes it and multiplies.
def _w4a16_make(d):
    packed = torch_npu.npu_convert_weight_to_int4pack(torch.randint(-8, 8, (2048, 2048), dtype=torch.int32).to(d))
    return (torch.randn(64, 2048, device=d, dtype=torch.bfloat16), packed,
            torch.rand(16, 2048, device=d, dtype=torch.bfloat16) * 0.01, torch.randn(16, 2048, device=d,
                                                                                    dtype=torch.bfloat16))


def _w4a16_composite(x, packed, scale, offset):
    shifts = torch.arange(28, -4, -4, dtype=torch.int32, device=packed.device)
    w = ((packed.unsqueeze(-1) << shifts) >> 28).flatten(-2).to(x.dtype)
    return x @ ((w + offset.repeat_interleave(128, 0)) * scale.repeat_interleave(128, 0))


# Paged GQA decode (vLLM-Ascend's): 8 sequences up to 1024 tokens in 128-token blocks, 16 query heads over 4
# key/value heads; the composite gathers the blocks, repeats the heads and runs softmax(q k^T) v.
def _decode_make(d):
    lens = [1024 - 7 * i for i in range(8)]
    return (torch.randn(8, 1, 16 * 64, device=d, dtype=torch.float16),
            torch.randn(64, 128, 4 * 64, device=d, dtype=torch.float16),
            torch.randn(64, 128, 4 * 64, device=d, dtype=torch.float16),
            torch.arange(64, device=d, dtype=torch.int32).view(8, 8), lens, torch.tensor(lens, device=d))


def _decode_fused(q, k, v, table, lens, _):
    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=16, num_key_value_heads=4,
                                                     input_layout="BSH", block_size=128, block_table=table,
                                                     actual_seq_lengths_kv=lens, scale=0.125)[0]


def _decode_composite(q, k, v, table, _, lens):
    def cache(c):
        return c[table.long()].flatten(1, 2).unflatten(-1, (4, 64)).transpose(1, 2).repeat_interleave(4, 1)

    s = (q.view(8, 1, 16, 64).transpose(1, 2).float() @ cache(k).float().transpose(-1, -2)) * 0.125
    s = s.masked_fill((torch.arange(1024, device=q.device) >= lens[:, None])[:, None, None, :], float("-inf"))
    return (torch.softmax(s, -1) @ cache(v).float()).half().transpose(1, 2).flatten(2)


# GQA causal prefill: 512 tokens, 16 query heads over 4 key/value heads, the compressed causal mask (sparse_mode 3).
def _prefill_make(d):
    return (torch.randn(1, 16, 512, 64, device=d, dtype=torch.float16),
            torch.randn(1, 4, 512, 64, device=d, dtype=torch.float16),
            torch.randn(1, 4, 512, 64, device=d, dtype=torch.float16),
            torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1).to(d))


def _prefill_fused(q, k, v, mask):
    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=16, num_key_value_heads=4,
                                                     input_layout="BNSD", atten_mask=mask, sparse_mode=3,
                                                     scale=0.125)[0]


def _prefill_composite(q, k, v, mask):
    s = (q.float() @ k.repeat_interleave(4, 1).float().transpose(-1, -2)) * 0.125
    s = s.masked_fill(mask[:512, :512], float("-inf"))
    return (torch.softmax(s, -1) @ v.repeat_interleave(4, 1).float()).half()


def _softmax_make(d):
    return torch.randn(4, 8, 256, 256, device=d, dtype=torch.bfloat16), torch.rand(4, 1, 256, 256, device=d) > 0.8


def _softmax_composite(x, mask):  # Megatron's unfused ScaledMaskedSoftmax
    return torch.softmax((x.float() * 0.125).masked_fill(mask, -10000.0), -1).to(x.dtype)


FUSED_OPS = {
    "npu_grouped_matmul (8 experts, 4096x256 . 256x512)": (_gmm_make, _gmm_fused, _gmm_composite),
    "npu_grouped_matmul (8 experts, 4096 tokens, bf16 1024->2816)": (_gmm_bf16_make, _gmm_fused, _gmm_composite),
    "npu_grouped_matmul fwd+bwd (8 experts, 4096 tokens, bf16 1024->2816)": (
        _gmm_train_make, _gmm_train_fused, _gmm_train_composite),
    "npu_moe_init_routing_v2 (4096 tokens x 1024 bf16, top-8 of 64)": (_routing_make, _routing_fused,
                                                                       _routing_composite),
    "npu_moe_token_permute (4096 tokens x 1024, top-2)": (
        _permute_make, torch_npu.npu_moe_token_permute, _permute_composite),
    "npu_moe_token_unpermute (4096 tokens x 1024, top-2)": (
        _unpermute_make, torch_npu.npu_moe_token_unpermute, _unpermute_composite),
    "npu_add_rms_norm (2048x2048 bf16)": (_add_rms_norm_make, torch_npu.npu_add_rms_norm, _add_rms_norm_composite),
    "npu_rotary_position_embedding (4x512x8x128 bf16)": (
        _rope_make, lambda x, c, s: torch_npu.npu_rotary_position_embedding(x, c, s, 0), _rope_composite),
    "npu_apply_rotary_pos_emb (q 8 heads, k 2, bf16)": (_apply_rope_make, _apply_rope_fused, _apply_rope_composite),
    "npu_rms_norm (2048x4096 bf16)": (_rms_norm_make, lambda x, g: torch_npu.npu_rms_norm(x, g)[0],
                                      _rms_norm_composite),
    "npu_rms_norm fwd+bwd (2048x4096 bf16)": (
        _rms_norm_train_make, lambda x, g, dy: torch_npu.npu_rms_norm(x, g)[0].backward(dy),
        lambda x, g, dy: _rms_norm_composite(x, g).backward(dy)),
    "npu_add_rms_norm fwd+bwd (2048x4096 bf16)": (
        _add_rms_norm_train_make, _add_rms_norm_train_fused, _add_rms_norm_train_composite),
    "npu_rotary_position_embedding fwd+bwd (4x512x8x128 bf16)": (
        _rope_train_make, _rope_train_fused, _rope_train_composite),
    "npu_rotary_mul (4x512x8x128 fp32)": (_rope_f32_make, torch_npu.npu_rotary_mul, _rope_composite),
    "npu_rotary_mul fwd+bwd (4x512x8x128 bf16)": (_rope_train_make, _rotary_mul_train_fused, _rope_train_composite),
    "npu_apply_adam_w (24 params, 6.3M elements)": (_adam_make, _adam_fused, _adam_composite),
    "npu_scaled_masked_softmax (4x8x256x256 bf16)": (
        _softmax_make, lambda x, m: torch_npu.npu_scaled_masked_softmax(x, m, 0.125), _softmax_composite),
    "npu_fast_gelu (4M elements)": (_gelu_make, torch_npu.npu_fast_gelu, lambda x: x * torch.sigmoid(1.702 * x)),
    "npu_dynamic_quant + npu_quant_matmul (W8A8, 64x2048 . 2048x2048)": (_w8a8_make, _w8a8_fused, _w8a8_composite),
    "npu_weight_quant_batchmatmul (W4A16 per group of 128, 64x2048 . 2048x2048)": (
        _w4a16_make, lambda x, w, s, o: torch_npu.npu_weight_quant_batchmatmul(x, w, s, o, antiquant_group_size=128),
        _w4a16_composite),
    "npu_fused_infer_attention_score (paged GQA decode, 8 x 1024 tokens)": (
        _decode_make, _decode_fused, _decode_composite),
    "npu_fused_infer_attention_score (GQA causal prefill, 512 tokens)": (
        _prefill_make, _prefill_fused, _prefill_composite),
}

CASES = {f"fused: {name}": (lambda m=make, f=fused, c=composite: _pair(m, f, c), "fused", "fused/composite < 1", 1)
         for name, (make, fused, composite) in FUSED_OPS.items()}
