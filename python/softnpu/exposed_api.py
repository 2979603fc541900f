"""torch_npu.utils.exposed_api: ``public_npu_functions``, the ops torch_npu lists in ``torch_npu.__all__``.

torch_npu's build generates this list from its op declarations: every op of op-plugin's
op_plugin/config/op_plugin_functions.yaml whose ``exposed:`` versions include torch 2.13 (op-plugin 5045ad2, the
submodule of torch_npu 94c0533), and those of torch_npu's npu_native_functions.yaml marked ``exposed: True``. The other
ops of the npu namespace (backward ops, ``npu_fusion_attention_grad``, ``npu_silu``, ...) are attributes of torch_npu
but not in its ``__all__``. softnpu exports the ones it registers (torch_npu/__init__.py).
"""

public_npu_functions = [
    "_npu_dropout", "empty_with_swapped_memory", "fast_gelu", "npu_advance_step_flashattn",
    "npu_all_gather_base_mm", "npu_alloc_float_status", "npu_alltoallv_gmm", "npu_alltoallv_quant_gmm",
    "npu_anchor_response_flags", "npu_anti_quant", "npu_apply_rotary_pos_emb", "npu_batch_nms",
    "npu_bert_apply_adam", "npu_block_sparse_attention", "npu_bmmV2", "npu_bounding_box_decode",
    "npu_bounding_box_encode", "npu_ciou", "npu_clear_float_status", "npu_clipped_swiglu",
    "npu_confusion_transpose", "npu_conv3d", "npu_convert_weight_to_int4pack", "npu_cross_entropy_loss",
    "npu_deformable_conv2d", "npu_dense_lightning_indexer_grad_kl_loss", "npu_dense_lightning_indexer_softmax_lse",
    "npu_diou", "npu_dropout_with_add_softmax", "npu_dynamic_block_quant", "npu_dynamic_quant",
    "npu_dynamic_quant_asymmetric", "npu_fast_gelu", "npu_ffn", "npu_format_cast", "npu_format_cast_",
    "npu_fused_attention_score", "npu_fused_causal_conv1d", "npu_fusion_attention", "npu_gather_sparse_index",
    "npu_gelu_mul", "npu_get_float_status", "npu_giou", "npu_gmm_alltoallv", "npu_grid_assign_positive",
    "npu_group_norm_silu", "npu_group_norm_swish", "npu_grouped_matmul", "npu_grouped_matmul_finalize_routing",
    "npu_incre_flash_attention", "npu_indexing", "npu_iou", "npu_kv_quant_sparse_flash_attention",
    "npu_lightning_indexer", "npu_linear", "npu_lstm", "npu_masked_causal_conv1d", "npu_max", "npu_mhc_post",
    "npu_mhc_post_backward", "npu_mhc_sinkhorn", "npu_mla_prolog", "npu_mla_prolog_v2", "npu_mm_all_reduce_base",
    "npu_mm_reduce_scatter_base", "npu_moe_compute_expert_tokens", "npu_moe_finalize_routing",
    "npu_moe_gating_top_k_backward", "npu_moe_gating_top_k_softmax", "npu_moe_gating_top_k_softmax_v2",
    "npu_moe_init_routing", "npu_moe_update_expert", "npu_mrope", "npu_multi_head_attention", "npu_nms_v4",
    "npu_nms_with_mask", "npu_one_hot", "npu_pad", "npu_prefetch", "npu_prompt_flash_attention",
    "npu_ps_roi_pooling", "npu_quant_gmm_alltoallv", "npu_quant_lightning_indexer", "npu_quant_matmul",
    "npu_quant_matmul_gelu", "npu_quant_matmul_reduce_sum", "npu_quant_scatter", "npu_quant_scatter_",
    "npu_quantize", "npu_random_choice_with_mask", "npu_recurrent_gated_delta_rule",
    "npu_recurrent_gated_delta_rule_functional", "npu_ring_attention_update", "npu_rms_norm", "npu_roi_align",
    "npu_rotary_mul", "npu_rotate_quant", "npu_rotated_iou", "npu_rotated_overlaps", "npu_scaled_masked_softmax",
    "npu_scatter_nd_update", "npu_scatter_nd_update_", "npu_scatter_pa_kv_cache", "npu_sign_bits_pack",
    "npu_sign_bits_unpack", "npu_sim_exponential_", "npu_slice", "npu_softmax_cross_entropy_with_logits",
    "npu_sparse_flash_attention", "npu_sparse_lightning_indexer_grad_kl_loss", "npu_swiglu",
    "npu_trans_quant_param", "npu_transpose", "npu_transpose_batchmatmul", "npu_transpose_quant_batchmatmul",
    "npu_weight_quant_batchmatmul", "npu_yolo_boxes_encode", "scatter_update", "scatter_update_"
]
