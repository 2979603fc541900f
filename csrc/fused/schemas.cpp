// The npu op namespace: torch_npu's fused ops under their torch_npu schemas (signatures and defaults), so
// torch.ops.npu.<name> and torch_npu.<name> take what torch_npu's take. One place for every schema; each op's
// kernels (Meta, CPU, Autograd) are in the file named after it.
#include <torch/library.h>

TORCH_LIBRARY(npu, m) {
  m.def("npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
        "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, float scale=1., float keep_prob=1., "
        "int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, int[]? prefix=None, "
        "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, "
        "bool sync=False) -> (Tensor, Tensor, Tensor, Tensor, int, int, int)");
  // The kernel of npu_fusion_attention: tensors only, so it launches on the stream like any op (an op returning
  // ints would have to wait for the device). npu_fusion_attention draws the dropout seed and offset on the host.
  m.def("_npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
        "Tensor? pse, Tensor? padding_mask, Tensor? atten_mask, float scale, float keep_prob, int pre_tockens, "
        "int next_tockens, int inner_precise, int[]? prefix, int[]? actual_seq_qlen, int[]? actual_seq_kvlen, "
        "int sparse_mode, int seed, int offset) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("npu_fusion_attention_grad(Tensor query, Tensor key, Tensor value, Tensor dy, int head_num, "
        "str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
        "Tensor? softmax_max=None, Tensor? softmax_sum=None, Tensor? softmax_in=None, Tensor? attention_in=None, "
        "float scale_value=1., float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, "
        "int inner_precise=0, int seed=0, int offset=0, int numels=0, int[]? prefix=None, "
        "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, "
        "bool sync=False) -> (Tensor, Tensor, Tensor, Tensor)");

  m.def("npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)");
  m.def("npu_rms_norm_backward(Tensor dy, Tensor self, Tensor gamma, Tensor rstd) -> (Tensor, Tensor)");

  m.def("npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') -> Tensor");
  m.def("npu_rotary_mul_backward(Tensor grad, Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') "
        "-> (Tensor, Tensor, Tensor)");

  m.def("npu_swiglu(Tensor self, int dim=-1) -> Tensor");
  m.def("npu_swiglu_backward(Tensor grad_output, Tensor self, int dim=-1) -> Tensor");

  m.def("npu_geglu(Tensor self, int dim=-1, int approximate=1, bool activate_left=False) -> (Tensor, Tensor)");
  m.def("npu_geglu_grad(Tensor grad_output, Tensor self, Tensor gelu, int dim=-1, int approximate=1, "
        "bool activate_left=False) -> Tensor");

  m.def("npu_format_cast(Tensor self, int acl_format) -> Tensor");
  m.def("npu_format_cast_.acl_format(Tensor(a!) self, int acl_format) -> Tensor(a!)");
  m.def("get_npu_format(Tensor self) -> int");
  m.def("empty_with_format(int[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
        "bool? pin_memory=None, int acl_format=2) -> Tensor");
  m.def("get_storage_size(Tensor self) -> int");
}
