"""Every op of the npu namespace under torch.compile, and its errors at the call.

The ops are read from the dispatcher (as tests/test_fused_registry.py does); each has a case here: its documented
minimal call on npu tensors. For each op, ``torch.compile(fullgraph=True)`` traces the call through the op's Meta
kernel (a graph break fails the test) and the compiled function gives the eager result; and one bad argument raises
a RuntimeError with torch_npu's message at the call, on npu and on the meta device (the Meta kernel checks it). An op
registered without a case here fails ``test_every_registered_op_has_a_case``, so a new op cannot skip these checks.

The compute+communication ops run in a one-rank hccl group (set up and torn down by a fixture). The two format
queries that return a Python int (INT_RESULTS) and npu_change_data_ptr (GRAPH_BREAKS: it re-points a storage) cannot
be in a full graph; they are checked to compile with a break.
"""

import os
import tempfile

import pytest
import torch
import torch_npu

N = "npu"
COMPRESSED = torch.triu(torch.ones(2048, 2048), 1).bool()
DUMPS = tempfile.TemporaryDirectory()  # save_npugraph_tensor's files


def r(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype)


def ints(lo, hi, *shape, dtype=torch.int8, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def _repoint_to_row_1(x):
    dst = torch.empty(16, device=x.device)
    torch_npu.npu_change_data_ptr(dst, x, 16)
    return dst * 2


def int4pack(values):
    return torch_npu.npu_convert_weight_to_int4pack(values.npu()).cpu()


class Case:
    """call(*tensors) with tensors = inputs() moved to the device; bad(device) must raise `message`."""

    def __init__(self, call, inputs, bad, message, hcom=False):
        self.call, self.inputs, self.bad, self.message, self.hcom = call, inputs, bad, message, hcom


def qkv(b=1, s=4, n=2, d=8, kv_s=None, layout="BSH"):
    kv_s = kv_s or s
    shape = {"BSH": lambda sq: (b, sq, n * d), "BNSD": lambda sq: (b, n, sq, d)}[layout]
    return [r(*shape(s), seed=1), r(*shape(kv_s), seed=2), r(*shape(kv_s), seed=3)]


def z(*shape, dtype=torch.float32, device="meta"):
    return torch.zeros(*shape, dtype=dtype, device=device)


ROUTING = torch.tensor([[0, 1], [1, 2], [2, 0]])  # 3 tokens, top-2 of 3 experts

CASES = {
    # ------------------------------------------------------------------------------------------------ activations
    "npu_swiglu": Case(lambda x: torch_npu.npu_swiglu(x), lambda: [r(4, 8)],
                       lambda d: torch_npu.npu_swiglu(z(4, 7, device=d)), "npu_swiglu"),
    "npu_swiglu_backward": Case(lambda g, x: torch_npu.npu_swiglu_backward(g, x), lambda: [r(4, 4), r(4, 8)],
                                lambda d: torch_npu.npu_swiglu_backward(z(4, 3, device=d), z(4, 8, device=d)),
                                "npu_swiglu_backward"),
    "npu_geglu": Case(lambda x: torch_npu.npu_geglu(x), lambda: [r(4, 8)],
                      lambda d: torch_npu.npu_geglu(z(4, 7, device=d)), "npu_geglu"),
    "npu_geglu_grad": Case(lambda g, x, h: torch_npu.npu_geglu_grad(g, x, h), lambda: [r(4, 4), r(4, 8), r(4, 4)],
                           lambda d: torch_npu.npu_geglu_grad(z(4, 3, device=d), z(4, 8, device=d),
                                                              z(4, 4, device=d)), "npu_geglu_grad"),
    "npu_fast_gelu": Case(lambda x: torch_npu.npu_fast_gelu(x), lambda: [r(4, 8)],
                          lambda d: torch_npu.npu_fast_gelu(z(4, dtype=torch.int32, device=d)), "npu_fast_gelu"),
    "fast_gelu": Case(lambda x: torch_npu.fast_gelu(x), lambda: [r(4, 8)],
                      lambda d: torch_npu.fast_gelu(z(4, dtype=torch.int32, device=d)), "npu_fast_gelu"),
    "npu_fast_gelu_backward": Case(lambda g, x: torch_npu.npu_fast_gelu_backward(g, x), lambda: [r(4, 8), r(4, 8)],
                                   lambda d: torch_npu.npu_fast_gelu_backward(z(4, device=d), z(5, device=d)),
                                   "npu_fast_gelu_backward"),
    "npu_cross_entropy_loss": Case(
        lambda x, t: torch_npu.npu_cross_entropy_loss(x, t), lambda: [r(6, 10), ints(0, 10, 6, dtype=torch.long)],
        lambda d: torch_npu.npu_cross_entropy_loss(z(6, 10, device=d), z(6, dtype=torch.long, device=d),
                                                   reduction="bad"), "npu_cross_entropy_loss"),
    "npu_cross_entropy_loss_backward": Case(
        lambda g, lp, t: torch_npu.npu_cross_entropy_loss_backward(g, lp, t),
        lambda: [r(1), torch.log_softmax(r(6, 10), -1), ints(0, 10, 6, dtype=torch.long)],
        lambda d: torch_npu.npu_cross_entropy_loss_backward(z(1, device=d), z(6, 10, device=d),
                                                            z(5, dtype=torch.long, device=d)),
        "npu_cross_entropy_loss"),
    "npu_scaled_masked_softmax": Case(
        lambda x, m: torch_npu.npu_scaled_masked_softmax(x, m, 0.5), lambda: [r(2, 2, 4, 4), r(2, 2, 4, 4) > 0],
        lambda d: torch_npu.npu_scaled_masked_softmax(z(2, 2, 4, 4, device=d), z(3, 2, 4, 4, dtype=torch.bool,
                                                                                  device=d)),
        "npu_scaled_masked_softmax"),
    "npu_scaled_masked_softmax_backward": Case(
        lambda g, y, m: torch_npu.npu_scaled_masked_softmax_backward(g, y, m, 0.5, False),
        lambda: [r(2, 2, 4, 4), torch.softmax(r(2, 2, 4, 4), -1), r(2, 2, 4, 4) > 0],
        lambda d: torch_npu.npu_scaled_masked_softmax_backward(z(2, 2, 4, 4, device=d), z(2, 2, 4, 5, device=d),
                                                               z(2, 2, 4, 4, dtype=torch.bool, device=d), 0.5,
                                                               False), "npu_scaled_masked_softmax_backward"),
    "npu_silu": Case(lambda x: torch_npu.npu_silu(x), lambda: [r(4, 8)],
                     lambda d: torch_npu.npu_silu(z(4, dtype=torch.int32, device=d)), "npu_silu"),
    "npu_silu_": Case(lambda x: torch_npu.npu_silu_(x.clone()) * 2, lambda: [r(4, 8)],
                      lambda d: torch_npu.npu_silu_(z(4, dtype=torch.int32, device=d)), "npu_silu_"),
    "_npu_silu_": Case(lambda x: _silu_in_place(x.clone()), lambda: [r(4, 8)],
                       lambda d: torch.ops.npu._npu_silu_(z(4, dtype=torch.int32, device=d)), "npu_silu_"),
    "npu_silu_backward": Case(lambda g, x, y: torch_npu.npu_silu_backward(g, x, y), lambda: [r(4, 8), r(4, 8), r(4, 8)],
                              lambda d: torch_npu.npu_silu_backward(z(4, device=d), z(4, device=d), z(5, device=d)),
                              "npu_silu_backward"),
    # ------------------------------------------------------------------------------------------------ attention
    "npu_fusion_attention": Case(
        lambda q, k, v: torch_npu.npu_fusion_attention(q, k, v, 2, "BSH", scale=0.3)[:3], qkv,
        lambda d: torch_npu.npu_fusion_attention(z(1, 4, 16, device=d), z(1, 4, 16, device=d),
                                                 z(1, 4, 16, device=d), 2, "XYZ"), "npu_fusion_attention"),
    "_npu_fusion_attention": Case(
        lambda q, k, v: torch.ops.npu._npu_fusion_attention(q, k, v, 2, "BSH", None, None, None, 0.3, 1.0,
                                                            2147483647, 2147483647, 0, None, None, None, 0, 0,
                                                            0)[:3], qkv,
        lambda d: torch.ops.npu._npu_fusion_attention(z(1, 4, 16, device=d), z(1, 4, 16, device=d),
                                                      z(1, 4, 16, device=d), 3, "BSH", None, None, None, 0.3, 1.0,
                                                      2147483647, 2147483647, 0, None, None, None, 0, 0, 0),
        "_npu_fusion_attention"),
    "npu_fusion_attention_grad": Case(
        lambda q, k, v, dy: torch_npu.npu_fusion_attention_grad(q, k, v, dy, 2, "BSH", scale_value=0.3)[:3],
        lambda: qkv() + [r(1, 4, 16, seed=4)],
        lambda d: torch_npu.npu_fusion_attention_grad(z(1, 4, 16, device=d), z(1, 4, 16, device=d),
                                                      z(1, 4, 16, device=d), z(1, 4, 8, device=d), 2, "BSH"),
        "npu_fusion_attention_grad"),
    "_npu_fusion_attention_grad": Case(
        lambda q, k, v, dy: torch.ops.npu._npu_fusion_attention_grad(
            q, k, v, dy, 2, "BSH", None, None, None, None, None, None, None, 0.3, 1.0, 2147483647, 2147483647, 0, 0,
            0, 0, None, None, None, 0, True, False, None)[:3],
        lambda: qkv() + [r(1, 4, 16, seed=4)],
        lambda d: torch.ops.npu._npu_fusion_attention_grad(
            z(1, 4, 16, device=d), z(1, 4, 16, device=d), z(1, 4, 16, device=d), z(1, 4, 8, device=d), 2, "BSH", None,
            None, None, None, None, None, None, 1.0, 1.0, 2147483647, 2147483647, 0, 0, 0, 0, None, None, None, 0,
            True, False, None), "npu_fusion_attention_grad"),
    "npu_fusion_attention_v2": Case(
        lambda q, k, v: torch_npu.npu_fusion_attention_v2(q, k, v, 2, "BSH", scale=0.3)[0], qkv,
        lambda d: torch_npu.npu_fusion_attention_v2(z(1, 4, 16, device=d), z(1, 4, 16, device=d),
                                                    z(1, 4, 16, device=d), 2, "BSH", pse_type=2),
        "npu_fusion_attention_v2"),
    "npu_prompt_flash_attention": Case(
        lambda q, k, v, m: torch_npu.npu_prompt_flash_attention(q, k, v, num_heads=2, input_layout="BNSD",
                                                                atten_mask=m, sparse_mode=2),
        lambda: qkv(layout="BNSD") + [COMPRESSED],
        lambda d: torch_npu.npu_prompt_flash_attention(z(1, 2, 4, 8, device=d), z(1, 2, 4, 8, device=d),
                                                       z(1, 2, 4, 8, device=d), num_heads=2, input_layout="XYZ"),
        "npu_prompt_flash_attention"),
    "npu_incre_flash_attention": Case(
        lambda q, k, v: torch_npu.npu_incre_flash_attention(q, k, v, num_heads=2, input_layout="BNSD"),
        lambda: qkv(s=1, kv_s=6, layout="BNSD"),
        lambda d: torch_npu.npu_incre_flash_attention(z(1, 2, 2, 8, device=d), z(1, 2, 6, 8, device=d),
                                                      z(1, 2, 6, 8, device=d), num_heads=2, input_layout="BNSD"),
        "npu_incre_flash_attention"),
    "npu_fused_infer_attention_score": Case(
        lambda q, k, v: torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, input_layout="BNSD",
                                                                  actual_seq_lengths_kv=[5], softmax_lse_flag=True),
        lambda: qkv(s=1, kv_s=6, layout="BNSD"),
        lambda d: torch_npu.npu_fused_infer_attention_score(z(1, 2, 1, 8, device=d), z(1, 2, 6, 8, device=d),
                                                            z(1, 2, 6, 8, device=d), num_heads=2,
                                                            input_layout="BNSD", antiquant_mode=3),
        "npu_fused_infer_attention_score"),
    "_npu_fused_infer_attention_score_get_max_workspace": Case(
        lambda q, k, v: torch.ops.npu._npu_fused_infer_attention_score_get_max_workspace(
            q, k, v, num_heads=2, input_layout="BNSD"),
        lambda: qkv(s=1, kv_s=6, layout="BNSD"),
        lambda d: torch.ops.npu._npu_fused_infer_attention_score_get_max_workspace(
            z(1, 2, 1, 8, device=d), z(1, 2, 6, 8, device=d), z(1, 2, 6, 8, device=d), num_heads=2,
            input_layout="XYZ"), "npu_fused_infer_attention_score"),
    "_npu_fused_infer_attention_score_out_": Case(
        lambda q, k, v: _infer_attention_out(q, k, v),
        lambda: qkv(s=1, kv_s=6, layout="BNSD"),
        lambda d: torch_npu.npu_fused_infer_attention_score.out(
            z(1, 2, 1, 8, device=d), z(1, 2, 6, 8, device=d), z(1, 2, 6, 8, device=d), num_heads=2,
            input_layout="BNSD", out=[z(1, 2, 1, 7, device=d), z(1, 2, 1, 1, device=d)]), "attention_out must be"),
    "npu_fused_infer_attention_score_v2": Case(
        lambda q, k, v: torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_query_heads=2, input_layout="BNSD",
                                                                     actual_seq_kvlen=[5], return_softmax_lse=True),
        lambda: qkv(s=1, kv_s=6, layout="BNSD"),
        lambda d: torch_npu.npu_fused_infer_attention_score_v2(z(1, 2, 1, 8, device=d), z(1, 2, 6, 8, device=d),
                                                               z(1, 2, 6, 8, device=d), num_query_heads=2,
                                                               input_layout="BNSD", query_quant_mode=1),
        "npu_fused_infer_attention_score_v2: query_quant_mode"),
    "_npu_fused_infer_attention_score_v2_get_max_workspace": Case(
        lambda q, k, v: torch.ops.npu._npu_fused_infer_attention_score_v2_get_max_workspace(
            q, k, v, num_query_heads=2, input_layout="BNSD"),
        lambda: qkv(s=1, kv_s=6, layout="BNSD"),
        lambda d: torch.ops.npu._npu_fused_infer_attention_score_v2_get_max_workspace(
            z(1, 2, 1, 8, device=d), z(1, 2, 6, 8, device=d), z(1, 2, 6, 8, device=d), num_query_heads=2,
            input_layout="XYZ"), "npu_fused_infer_attention_score_v2"),
    "_npu_fused_infer_attention_score_v2_out_": Case(
        lambda q, k, v: _infer_attention_v2_out(q, k, v),
        lambda: qkv(s=1, kv_s=6, layout="BNSD"),
        lambda d: torch_npu.npu_fused_infer_attention_score_v2.out(
            z(1, 2, 1, 8, device=d), z(1, 2, 6, 8, device=d), z(1, 2, 6, 8, device=d), num_query_heads=2,
            input_layout="BNSD", out=[z(1, 2, 1, 7, device=d), z(1, 2, 1, 1, device=d)]), "attention_out must be"),
    # ------------------------------------------------------------------------------------------------ communication
    "npu_mm_all_reduce_base": Case(
        lambda a, b, hcom: torch_npu.npu_mm_all_reduce_base(a, b, hcom),
        lambda: [r(4, 32).half(), r(32, 6).half()],
        lambda d: torch_npu.npu_mm_all_reduce_base(z(4, 32, dtype=torch.half, device=d),
                                                   z(32, 6, dtype=torch.half, device=d), "g", reduce_op="max"),
        "npu_mm_all_reduce_base: reduce_op", hcom=True),
    "npu_all_gather_base_mm": Case(
        lambda a, b, hcom: torch_npu.npu_all_gather_base_mm(a, b, hcom, 1),
        lambda: [r(4, 32).half(), r(32, 6).half()],
        lambda d: torch_npu.npu_all_gather_base_mm(z(4, 32, dtype=torch.half, device=d),
                                                   z(16, 6, dtype=torch.half, device=d), "g", 2),
        "npu_all_gather_base_mm: x1's k", hcom=True),
    "npu_mm_reduce_scatter_base": Case(
        lambda a, b, hcom: torch_npu.npu_mm_reduce_scatter_base(a, b, hcom, 1),
        lambda: [r(4, 32).half(), r(32, 6).half()],
        lambda d: torch_npu.npu_mm_reduce_scatter_base(z(4, 32, dtype=torch.half, device=d),
                                                       z(32, 6, dtype=torch.half, device=d), "g", 3),
        "npu_mm_reduce_scatter_base", hcom=True),
    # ------------------------------------------------------------------------------------------------ moe
    "npu_grouped_matmul": Case(
        lambda x, w, counts: torch_npu.npu_grouped_matmul([x], [w], group_list=counts, split_item=2, group_type=0,
                                                          group_list_type=1)[0],
        lambda: [r(6, 8), r(3, 8, 4), torch.tensor([2, 1, 3])],
        lambda d: torch_npu.npu_grouped_matmul([z(6, 8, device=d)], [z(3, 7, 4, device=d)], split_item=2,
                                               group_type=0, group_list=torch.tensor([2, 1, 3], device=d),
                                               group_list_type=1), "npu_grouped_matmul"),
    "npu_moe_gating_top_k_softmax": Case(
        lambda x: torch_npu.npu_moe_gating_top_k_softmax(x, k=2), lambda: [r(5, 4)],
        lambda d: torch_npu.npu_moe_gating_top_k_softmax(z(5, 4, device=d), k=5), "npu_moe_gating_top_k_softmax"),
    "npu_moe_init_routing": Case(
        lambda x, rows, experts: torch_npu.npu_moe_init_routing(x, rows, experts, 3),
        lambda: [r(3, 8), torch.arange(6, dtype=torch.int32).view(2, 3).t().contiguous(),
                 ROUTING.to(torch.int32)],
        lambda d: torch_npu.npu_moe_init_routing(z(3, 8, device=d), z(3, 2, dtype=torch.int32, device=d),
                                                 z(3, 3, dtype=torch.int32, device=d), 3), "npu_moe_init_routing"),
    "npu_moe_init_routing_v2": Case(
        lambda x, experts: torch_npu.npu_moe_init_routing_v2(x, experts, active_num=6, expert_num=3),
        lambda: [r(3, 8), ROUTING.to(torch.int32)],
        lambda d: torch_npu.npu_moe_init_routing_v2(z(3, 8, device=d), z(3, 2, dtype=torch.int32, device=d),
                                                    drop_pad_mode=5), "npu_moe_init_routing_v2"),
    "npu_moe_finalize_routing": Case(
        lambda rows, scales, src: torch_npu.npu_moe_finalize_routing(rows, None, None, None, scales, src, None),
        lambda: [r(6, 8), torch.rand(3, 2), torch.tensor([3, 0, 4, 1, 5, 2], dtype=torch.int32)],
        lambda d: torch_npu.npu_moe_finalize_routing(z(6, 8, device=d), None, None, None, z(3, 2, device=d),
                                                     z(6, dtype=torch.int32, device=d), None, drop_pad_mode=4),
        "npu_moe_finalize_routing"),
    "npu_moe_token_permute": Case(
        lambda x, idx: torch_npu.npu_moe_token_permute(x, idx), lambda: [r(3, 8), ROUTING],
        lambda d: torch_npu.npu_moe_token_permute(z(3, 8, device=d), z(4, 2, dtype=torch.long, device=d)),
        "npu_moe_token_permute"),
    "npu_moe_token_permute_grad": Case(
        lambda x, g, idx, s: torch_npu.npu_moe_token_permute_grad(x, g, idx, s),
        lambda: [r(3, 8), r(6, 8), ROUTING, torch.argsort(ROUTING.flatten(), stable=True)],
        lambda d: torch_npu.npu_moe_token_permute_grad(z(3, 8, device=d), z(6, 8, device=d),
                                                       z(3, 2, device=d), z(6, dtype=torch.long, device=d)),
        "npu_moe_token_permute_grad"),
    "npu_moe_token_unpermute": Case(
        lambda p, s, probs: torch_npu.npu_moe_token_unpermute(p, s, probs),
        lambda: [r(6, 8), torch.argsort(ROUTING.flatten(), stable=True), torch.rand(3, 2)],
        lambda d: torch_npu.npu_moe_token_unpermute(z(6, 8, device=d), z(6, dtype=torch.long, device=d),
                                                    z(4, 2, device=d)), "npu_moe_token_unpermute"),
    "npu_moe_token_unpermute_grad": Case(
        lambda p, g, s, probs: torch_npu.npu_moe_token_unpermute_grad(p, g, s, probs),
        lambda: [r(6, 8), r(3, 8), torch.argsort(ROUTING.flatten(), stable=True), torch.rand(3, 2)],
        lambda d: torch_npu.npu_moe_token_unpermute_grad(z(6, 8, device=d), z(3, 7, device=d),
                                                         z(6, dtype=torch.long, device=d), z(3, 2, device=d)),
        "npu_moe_token_unpermute_grad"),
    "npu_moe_token_permute_with_routing_map": Case(
        lambda x, m: torch_npu.npu_moe_token_permute_with_routing_map(x, m, num_out_tokens=6),
        lambda: [r(3, 8), torch.nn.functional.one_hot(ROUTING, 3).sum(1).bool()],
        lambda d: torch_npu.npu_moe_token_permute_with_routing_map(z(3, 8, device=d),
                                                                   z(4, 3, dtype=torch.bool, device=d)),
        "npu_moe_token_permute_with_routing_map"),
    "npu_moe_token_permute_with_routing_map_grad": Case(
        lambda g, s, m: torch_npu.npu_moe_token_permute_with_routing_map_grad(g, None, s, m, 3, 3, False),
        lambda: [r(6, 8), torch.tensor([0, 2, 0, 1, 1, 2]),
                 torch.nn.functional.one_hot(ROUTING, 3).sum(1).bool()],
        lambda d: torch_npu.npu_moe_token_permute_with_routing_map_grad(
            z(6, 8, device=d), None, z(5, dtype=torch.long, device=d), z(3, 3, dtype=torch.bool, device=d), 3, 3,
            False), "npu_moe_token_permute_with_routing_map_grad"),
    # ------------------------------------------------------------------------------------------------ debug
    # They return nothing: the compiled call must keep them (side effects) and return None like the eager one.
    "print_npugraph_tensor": Case(lambda x: torch_npu.print_npugraph_tensor(x * 2, tensor_name="x2"),
                                  lambda: [r(2, 3)], None, None),
    "save_npugraph_tensor": Case(
        lambda x, y: torch_npu.save_npugraph_tensor.tensor_list(
            [x, y], save_path=os.path.join(DUMPS.name, "xy.pt"), overwrite=True), lambda: [r(2, 3), r(4)], None,
        None),
    # ------------------------------------------------------------------------------------------------ indexing
    "npu_slice": Case(lambda x: torch_npu.npu_slice(x, [1, 2], [2, 3]), lambda: [r(4, 8)],
                      lambda d: torch_npu.npu_slice(z(4, 8, device=d), [3, 0], [2, 8]), "npu_slice"),
    # ------------------------------------------------------------------------------------------------ normalization
    "npu_rms_norm": Case(lambda x, g: torch_npu.npu_rms_norm(x, g), lambda: [r(4, 16), r(16)],
                         lambda d: torch_npu.npu_rms_norm(z(4, 16, device=d), z(8, device=d)), "npu_rms_norm"),
    "npu_rms_norm_backward": Case(
        lambda dy, x, g, rstd: torch_npu.npu_rms_norm_backward(dy, x, g, rstd),
        lambda: [r(4, 16), r(4, 16), r(16), torch.rand(4, 1) + 0.5],
        lambda d: torch_npu.npu_rms_norm_backward(z(4, 16, device=d), z(4, 16, device=d), z(8, device=d),
                                                  z(4, 1, device=d)), "npu_rms_norm_backward"),
    "npu_add_rms_norm": Case(lambda a, b, g: torch_npu.npu_add_rms_norm(a, b, g), lambda: [r(4, 16), r(4, 16), r(16)],
                             lambda d: torch_npu.npu_add_rms_norm(z(4, 16, device=d), z(4, 8, device=d),
                                                                  z(16, device=d)), "npu_add_rms_norm"),
    # ------------------------------------------------------------------------------------------------ optimizers
    "npu_apply_adam_w": Case(
        lambda var, m, v, g: torch_npu.npu_apply_adam_w(0.9, 0.999, 1e-3, 0.01, 0.9, 0.999, 1e-8, g, None, False,
                                                        False, out=(var.clone(), m.clone(), v.clone())),
        lambda: [r(10), r(10), r(10).abs(), r(10)],
        lambda d: torch_npu.npu_apply_adam_w(0.9, 0.999, 1e-3, 0.01, 0.9, 0.999, 1e-8, z(10, device=d), None,
                                             False, False, out=(z(10, device=d), z(9, device=d), z(10, device=d))),
        "npu_apply_adam_w"),
    "_npu_apply_adam_w_": Case(
        lambda var, m, v, g: _adam_in_place(var.clone(), m.clone(), v.clone(), g),
        lambda: [r(10), r(10), r(10).abs(), r(10)],
        lambda d: torch.ops.npu._npu_apply_adam_w_(z(10, device=d), z(9, device=d), z(10, device=d), 0.9, 0.999,
                                                   1e-3, 0.01, 0.9, 0.999, 1e-8, z(10, device=d), None, False,
                                                   False), "npu_apply_adam_w"),
    "npu_bert_apply_adam": Case(
        lambda var, m, v, g: torch_npu.npu_bert_apply_adam(1e-3, 0.9, 0.99, 1e-6, g, 1.0, 2.0, 0.01,
                                                           out=(var.clone(), m.clone(), v.clone())),
        lambda: [r(64), r(64).abs(), r(64).abs(), r(64)],
        lambda d: torch_npu.npu_bert_apply_adam(1e-3, 0.9, 0.99, 1e-6, z(8, device=d), 1.0, 2.0, 0.01,
                                                out=(z(8, device=d), z(8, device=d), z(7, device=d))),
        "npu_bert_apply_adam"),
    "_npu_bert_apply_adam_": Case(
        lambda var, m, v, g: _bert_adam_in_place(var.clone(), m.clone(), v.clone(), g),
        lambda: [r(64), r(64).abs(), r(64).abs(), r(64)],
        lambda d: torch.ops.npu._npu_bert_apply_adam_(z(8, device=d), z(8, device=d), z(8, device=d), 1e-3, 0.9,
                                                      0.99, 1e-6, z(8, device=d), 1.0, 2.0, 0.01, None, 2),
        "adam_mode"),
    # ------------------------------------------------------------------------------------------------ reductions
    "npu_max": Case(lambda x: torch_npu.npu_max(x, dim=1), lambda: [r(4, 8)],
                    lambda d: torch_npu.npu_max(z(4, 0, device=d), dim=1), "npu_max"),
    "npu_min": Case(lambda x: torch_npu.npu_min(x, 0, keepdim=True), lambda: [r(4, 8)],
                    lambda d: torch_npu.npu_min(z(4, 0, device=d), dim=1), "npu_min"),
    "npu_max_backward": Case(
        lambda g, x: torch_npu.npu_max_backward(g, 1, torch_npu.npu_max(x, dim=1)[1], [4, 8], False),
        lambda: [r(4), r(4, 8)],
        lambda d: torch_npu.npu_max_backward(z(4, device=d), 1, z(5, dtype=torch.int32, device=d), [4, 8], False),
        "npu_max_backward"),
    "npu_min_backward": Case(
        lambda g, x: torch_npu.npu_min_backward(g, 0, torch_npu.npu_min(x, 0, True)[1], [4, 8], True),
        lambda: [r(1, 8), r(4, 8)],
        lambda d: torch_npu.npu_min_backward(z(1, 8, device=d), 0, z(1, 7, dtype=torch.int32, device=d), [4, 8],
                                             True), "npu_min_backward"),
    # ------------------------------------------------------------------------------------------------ quantization
    "npu_dynamic_quant": Case(lambda x: torch_npu.npu_dynamic_quant(x), lambda: [r(4, 16, dtype=torch.bfloat16)],
                              lambda d: torch_npu.npu_dynamic_quant(z(4, 16, device=d)), "npu_dynamic_quant"),
    "npu_quant_matmul": Case(
        lambda a, b, s, p: torch_npu.npu_quant_matmul(a, b, s, pertoken_scale=p, output_dtype=torch.bfloat16),
        lambda: [ints(-128, 128, 4, 32), ints(-128, 128, 32, 8), torch.rand(8), torch.rand(4)],
        lambda d: torch_npu.npu_quant_matmul(z(4, 32, dtype=torch.int8, device=d),
                                             z(16, 8, dtype=torch.int8, device=d), z(8, device=d)),
        "npu_quant_matmul: x1's k"),
    "npu_trans_quant_param": Case(lambda s, o: torch_npu.npu_trans_quant_param(s, o), lambda: [torch.rand(8), r(8)],
                                  lambda d: torch_npu.npu_trans_quant_param(z(8, dtype=torch.half, device=d)),
                                  "npu_trans_quant_param"),
    "npu_weight_quant_batchmatmul": Case(
        lambda x, w, s: torch_npu.npu_weight_quant_batchmatmul(x, w, s),
        lambda: [r(4, 32, dtype=torch.half), ints(-128, 128, 32, 8), torch.rand(8).half()],
        lambda d: torch_npu.npu_weight_quant_batchmatmul(z(4, 32, dtype=torch.half, device=d),
                                                         z(16, 8, dtype=torch.int8, device=d),
                                                         z(8, dtype=torch.half, device=d)),
        "npu_weight_quant_batchmatmul"),
    "npu_convert_weight_to_int4pack": Case(
        lambda w: torch_npu.npu_convert_weight_to_int4pack(w), lambda: [ints(-8, 8, 8, 16, dtype=torch.int32)],
        lambda d: torch_npu.npu_convert_weight_to_int4pack(z(8, 12, dtype=torch.int32, device=d)),
        "npu_convert_weight_to_int4pack"),
    "npu_dynamic_mx_quant": Case(
        lambda x: torch_npu.npu_dynamic_mx_quant(x, dst_type=torch.float8_e4m3fn)[1],
        lambda: [r(4, 64, dtype=torch.bfloat16)],
        lambda d: torch_npu.npu_dynamic_mx_quant(z(4, 64, dtype=torch.bfloat16, device=d), block_size=48),
        "npu_dynamic_mx_quant"),
    "npu_sign_bits_pack": Case(lambda x: torch_npu.npu_sign_bits_pack(x, 2), lambda: [r(32)],
                               lambda d: torch_npu.npu_sign_bits_pack(z(13, device=d), 3), "npu_sign_bits_pack"),
    "npu_sign_bits_unpack": Case(
        lambda x: torch_npu.npu_sign_bits_unpack(x, 2, torch.float32), lambda: [ints(0, 256, 4, dtype=torch.uint8)],
        lambda d: torch_npu.npu_sign_bits_unpack(z(4, dtype=torch.uint8, device=d), 2, torch.int32),
        "npu_sign_bits_unpack"),
    # ------------------------------------------------------------------------------------------------ rotary
    "npu_rotary_mul": Case(lambda x, c, s: torch_npu.npu_rotary_mul(x, c, s),
                           lambda: [r(2, 4, 2, 8), r(1, 4, 1, 8), r(1, 4, 1, 8)],
                           lambda d: torch_npu.npu_rotary_mul(z(2, 4, 2, 8, device=d), z(1, 4, 1, 6, device=d),
                                                              z(1, 4, 1, 8, device=d)), "npu_rotary_mul"),
    "npu_rotary_mul_backward": Case(
        lambda g, x, c, s: torch_npu.npu_rotary_mul_backward(g, x, c, s),
        lambda: [r(2, 4, 2, 8), r(2, 4, 2, 8), r(1, 4, 1, 8), r(1, 4, 1, 8)],
        lambda d: torch_npu.npu_rotary_mul_backward(z(2, 4, 2, 8, device=d), z(2, 4, 2, 8, device=d),
                                                    z(1, 4, 1, 6, device=d), z(1, 4, 1, 8, device=d)),
        "npu_rotary_mul_backward"),
    "npu_rotary_position_embedding": Case(
        lambda x, c, s: torch_npu.npu_rotary_position_embedding(x, c, s, 0),
        lambda: [r(2, 4, 2, 8), r(1, 4, 1, 8), r(1, 4, 1, 8)],
        lambda d: torch_npu.npu_rotary_position_embedding(z(2, 4, 2, 8, device=d), z(1, 4, 1, 8, device=d),
                                                          z(1, 4, 1, 8, device=d), 5),
        "npu_rotary_position_embedding"),
    "npu_rotary_position_embedding_backward": Case(
        lambda g, c, s, x: torch_npu.npu_rotary_position_embedding_backward(g, c, s, x, 0),
        lambda: [r(2, 4, 2, 8), r(1, 4, 1, 8), r(1, 4, 1, 8), r(2, 4, 2, 8)],
        lambda d: torch_npu.npu_rotary_position_embedding_backward(z(2, 4, 2, 8, device=d), z(1, 4, 1, 8, device=d),
                                                                   z(1, 4, 1, 8, device=d), None, 5),
        "npu_rotary_position_embedding_backward"),
    "npu_apply_rotary_pos_emb": Case(
        lambda q, k, c, s: torch_npu.npu_apply_rotary_pos_emb(q.clone(), k.clone(), c, s),
        lambda: [r(2, 4, 2, 8), r(2, 4, 1, 8), r(2, 4, 1, 8), r(2, 4, 1, 8)],
        lambda d: torch_npu.npu_apply_rotary_pos_emb(z(2, 4, 2, 8, device=d), z(2, 4, 1, 8, device=d),
                                                     z(2, 4, 1, 8, device=d), z(2, 4, 1, 8, device=d),
                                                     layout="XYZ"), "npu_apply_rotary_pos_emb"),
    "_npu_apply_rotary_pos_emb_": Case(
        lambda q, k, c, s: _rope_in_place(q.clone(), k.clone(), c, s),
        lambda: [r(2, 4, 2, 8), r(2, 4, 1, 8), r(2, 4, 1, 8), r(2, 4, 1, 8)],
        lambda d: torch.ops.npu._npu_apply_rotary_pos_emb_(z(2, 4, 2, 8, device=d), z(2, 4, 1, 8, device=d),
                                                           z(2, 4, 1, 8, device=d), z(2, 4, 1, 8, device=d), "XYZ",
                                                           "half"), "npu_apply_rotary_pos_emb"),
    # ------------------------------------------------------------------------------------------------ formats
    "npu_format_cast": Case(lambda x: torch_npu.npu_format_cast(x, 29) * 2, lambda: [r(4, 16)],
                            lambda d: torch_npu.npu_format_cast(z(4, 16, device=d), 1234), "format"),
    "npu_format_cast_": Case(lambda x: torch_npu.npu_format_cast_(x.clone(), 29) * 2, lambda: [r(4, 16)],
                             lambda d: torch_npu.npu_format_cast_(z(4, 16, device=d), 1234), "format"),
    "empty_with_format": Case(lambda x: x + torch_npu.empty_with_format((4, 16), device=x.device).zero_(),
                              lambda: [r(4, 16)],
                              lambda d: torch_npu.empty_with_format((4, 16), device=d, acl_format=1234), "format"),
    "empty_with_swapped_memory": Case(
        lambda x: x + torch_npu.empty_with_swapped_memory((4, 16), device=x.device).zero_(), lambda: [r(4, 16)],
        lambda d: torch_npu.empty_with_swapped_memory((-1, 16), device=d), "negative dimension"),
    "npu_change_data_ptr": Case(lambda x: _repoint_to_row_1(x), lambda: [r(4, 16)], None, None),
    "get_npu_format": Case(lambda x: x * torch_npu.get_npu_format(x), lambda: [r(4, 16)], None, None),
    "get_storage_size": Case(lambda x: x * torch_npu.get_storage_size(x), lambda: [r(4, 16)], None, None),
}


def _adam_in_place(var, m, v, g):
    torch.ops.npu._npu_apply_adam_w_(var, m, v, 0.9, 0.999, 1e-3, 0.01, 0.9, 0.999, 1e-8, g, None, False, False)
    return var, m, v


def _infer_attention_out(q, k, v):
    out = torch.empty_like(q)
    lse = torch.empty(1, 2, 1, 1, device=q.device)
    return torch_npu.npu_fused_infer_attention_score.out(q, k, v, num_heads=2, input_layout="BNSD",
                                                         softmax_lse_flag=True, out=[out, lse])


def _infer_attention_v2_out(q, k, v):
    out = torch.empty_like(q)
    lse = torch.empty(1, 2, 1, 1, device=q.device)
    return torch_npu.npu_fused_infer_attention_score_v2.out(q, k, v, num_query_heads=2, input_layout="BNSD",
                                                            return_softmax_lse=True, out=[out, lse])


def _silu_in_place(x):
    torch.ops.npu._npu_silu_(x)
    return x


def _bert_adam_in_place(var, m, v, g):
    torch.ops.npu._npu_bert_apply_adam_(var, m, v, 1e-3, 0.9, 0.99, 1e-6, g, 1.0, 2.0, 0.01, 5e-4, 1)
    return var, m, v


def _rope_in_place(q, k, c, s):
    torch.ops.npu._npu_apply_rotary_pos_emb_(q, k, c, s, "BSND", "half")
    return q, k


def registered():
    """The op names (overloads dropped) of the npu namespace, from the dispatcher."""
    return sorted({name.split("::")[1].split(".")[0] for name in torch._C._dispatch_get_all_op_names()
                   if name.startswith("npu::")})


@pytest.fixture(scope="module")
def hcom():
    """A one-rank hccl group for the compute+communication ops; destroyed after this module."""
    import tempfile

    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        store = tempfile.mkdtemp()
        dist.init_process_group("hccl", init_method=f"file://{os.path.join(store, 'store')}", rank=0, world_size=1)
    yield dist.group.WORLD._get_backend(torch.device(N)).get_hccl_comm_name(0)
    if created:
        dist.destroy_process_group()


def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in flat(o)] if isinstance(out, (tuple, list)) else [out]


# Ops returning a Python int: Dynamo cannot put a non-tensor op result in a graph (its graph break gb0208), so
# fullgraph=True refuses them; without it they compile with a break around the call.
INT_RESULTS = {"get_npu_format", "get_storage_size"}
# Ops a graph cannot hold: npu_change_data_ptr re-points a storage, which no traced graph can express (it has no
# Meta kernel, as torch_npu's); Dynamo breaks the graph around it and the call runs eagerly.
GRAPH_BREAKS = {"npu_change_data_ptr": "does not support running with fake tensors"}


def test_every_registered_op_has_a_case():
    assert sorted(set(registered()) - set(CASES)) == [], "npu ops without a compile/error case in this file"
    assert sorted(set(CASES) - set(registered())) == [], "cases for ops that are not registered"


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiles_fullgraph_to_the_eager_result(name, request):
    case = CASES[name]
    tensors = [t.to(N) for t in case.inputs()]
    if case.hcom:
        tensors.append(request.getfixturevalue("hcom"))
    torch._dynamo.reset()
    breaks = GRAPH_BREAKS.get(name) or ("returned non-Tensor" if name in INT_RESULTS else None)
    if breaks:
        with pytest.raises(torch._dynamo.exc.Unsupported, match=breaks):
            torch.compile(case.call, fullgraph=True, backend="aot_eager")(*tensors)
        torch._dynamo.reset()
    compiled = torch.compile(case.call, fullgraph=breaks is None, backend="aot_eager")
    got, want = flat(compiled(*tensors)), flat(case.call(*tensors))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            assert g.device == w.device and g.dtype == w.dtype and g.shape == w.shape
            torch.testing.assert_close(g.cpu(), w.cpu(), equal_nan=True)
        else:
            assert g == w


@pytest.mark.parametrize("device", ["meta", N])
@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.bad is not None))
def test_bad_arguments_raise_at_the_call(name, device):
    case = CASES[name]
    with pytest.raises(RuntimeError, match=case.message):
        case.bad(device)
