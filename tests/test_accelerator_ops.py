"""Ops ATen calls only for accelerators (csrc/backend/ops/accelerator_ops.cpp): no CPU kernel exists for the generic
path to run, so npu composes them of its own ops. The fused RNN cells (every LSTM and GRU on npu), SyncBatchNorm's
statistics, against the CPU; the quantizing ops refuse npu at the call; and an audit of the dispatcher: every other
op without a CPU, composite or npu kernel must be one that no device-generic code calls for npu, with the reason."""

import re
import textwrap

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from conftest import run_python

RNN_CONFIGS = {
    "one layer": dict(num_layers=1),
    "two layers, bidirectional, batch_first": dict(num_layers=2, bidirectional=True, batch_first=True),
    "no bias, bidirectional": dict(num_layers=2, bias=False, bidirectional=True),
}


def _run_rnn(module, device, packed, batch_first):
    g = torch.Generator().manual_seed(1)
    batch, steps = 3, 5
    shape = (batch, steps, 8) if batch_first else (steps, batch, 8)
    x = torch.randn(*shape, generator=g).to(device).requires_grad_()
    inp = x
    if packed:
        inp = pack_padded_sequence(x, torch.tensor([5, 2, 4]), batch_first=batch_first, enforce_sorted=False)
    out, state = module(inp)
    if packed:
        out, _ = pad_packed_sequence(out, batch_first=batch_first)
    states = list(state) if isinstance(state, tuple) else [state]
    loss = out.pow(2).sum() + sum(s.sin().sum() for s in states)
    loss.backward()
    results = [out, *states, x.grad] + [p.grad for p in module.parameters()]
    return [t.detach().cpu() for t in results]  # reads back: a kernel error is charged to this case


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("config", list(RNN_CONFIGS))
@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU], ids=["LSTM", "GRU"])
def test_rnn_forward_and_backward_match_the_cpu(cls, config, packed):
    kwargs = RNN_CONFIGS[config]
    torch.manual_seed(0)
    cpu = cls(8, 16, **kwargs)
    npu = cls(8, 16, **kwargs)
    npu.load_state_dict(cpu.state_dict())
    npu.npu()
    batch_first = kwargs.get("batch_first", False)
    expected = _run_rnn(cpu, "cpu", packed, batch_first)
    actual = _run_rnn(npu, "npu", packed, batch_first)
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5, msg=lambda m: f"result {i}: {m}")


def test_lstm_with_projections_and_cells_match_the_cpu():
    torch.manual_seed(0)
    modules = [nn.LSTM(8, 16, proj_size=4, num_layers=2), nn.LSTMCell(8, 16), nn.GRUCell(8, 16)]
    g = torch.Generator().manual_seed(2)
    for cpu in modules:
        npu = type(cpu)(8, 16, **({"proj_size": 4, "num_layers": 2} if isinstance(cpu, nn.LSTM) else {}))
        npu.load_state_dict(cpu.state_dict())
        npu.npu()
        x = torch.randn(5, 3, 8, generator=g) if isinstance(cpu, nn.LSTM) else torch.randn(3, 8, generator=g)
        results = []
        for module, device in ((cpu, "cpu"), (npu, "npu")):
            xi = x.detach().to(device).requires_grad_()
            out = module(xi)
            out = out[0] if isinstance(out, tuple) else out
            out.pow(2).sum().backward()
            results.append([out.detach().cpu(), xi.grad.cpu()] + [p.grad.cpu() for p in module.parameters()])
        for a, e in zip(results[1], results[0]):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5, msg=lambda m: f"{type(cpu).__name__}: {m}")


def test_sync_batch_norm_statistics_match_batch_norm():
    # SyncBatchNorm's autograd function on npu over a one-process hccl group runs every statistics op (stats, gather
    # with counts, elemt, backward reduce and elemt); it must equal BatchNorm on the CPU, running statistics included.
    result = run_python(textwrap.dedent("""
        import torch, torch_npu, torch.distributed as dist
        from torch.nn.modules._functions import SyncBatchNorm
        dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
        torch.manual_seed(0)
        x = torch.randn(4, 3, 5, 5) * 2 + 1
        weight, bias = torch.randn(3), torch.randn(3)
        ref = torch.nn.BatchNorm2d(3, momentum=0.2)
        with torch.no_grad():
            ref.weight.copy_(weight); ref.bias.copy_(bias)
        rm, rv = torch.zeros(3, device="npu"), torch.ones(3, device="npu")
        xn = x.npu().requires_grad_()
        wn, bn = weight.npu().requires_grad_(), bias.npu().requires_grad_()
        out = SyncBatchNorm.apply(xn, wn, bn, rm, rv, ref.eps, 0.2, dist.group.WORLD, 1)
        xc = x.clone().requires_grad_()
        expected = ref(xc)
        grad = torch.randn_like(x)
        out.backward(grad.npu())
        expected.backward(grad)
        pairs = [(out, expected), (xn.grad, xc.grad), (wn.grad, ref.weight.grad), (bn.grad, ref.bias.grad),
                 (rm, ref.running_mean), (rv, ref.running_var)]
        for i, (a, e) in enumerate(pairs):
            torch.testing.assert_close(a.detach().cpu(), e.detach(), rtol=1e-4, atol=1e-5, msg=lambda m: f"{i}: {m}")
        dist.destroy_process_group()
        print("OK")
        """))
    assert result.lines[-1:] == ["OK"], result.describe()


@pytest.mark.parametrize("call", [
    "torch.quantize_per_tensor(x, 0.1, 0, torch.quint8)",
    "torch.quantize_per_channel(x, torch.ones(4, device='npu'), torch.zeros(4, dtype=torch.long, device='npu'), 0, "
    "torch.qint8)",
    "torch.quantize_per_tensor_dynamic(x, torch.quint8, False)",
])
def test_quantizing_raises_not_implemented_naming_the_op(call):
    x = torch.randn(4, 4, device="npu")
    op = call.split("(")[0].split(".")[-1]
    with pytest.raises(NotImplementedError, match=rf"aten::{op}.*quantized tensors are not supported on npu"):
        eval(call)
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)  # the device goes on


# Every op the dispatcher holds with no CPU, composite or npu kernel, by why npu needs none. A new op in a later torch
# that matches none of these fails the audit until someone decides.
NEEDS_NO_NPU_KERNEL = {
    "another backend's library (cuDNN, MIOpen, oneDNN layouts, MPS, Triton): ATen calls it only for that backend":
        r"cudnn|miopen|mkldnn|_mps|mps_|lstm_mps|_triton",
    "sparse-layout ops: their kernels are on the sparse keys (npu's SparsePrivateUse1 ones: ops/sparse.cpp)":
        r"sparse|_coalesce|_indices$|_values$|_nnz|_dimI|_dimV|hspmm|_to_dense|_spsolve|_cslt|native_norm",
    "nested tensors, not supported on npu": r"_nested|to_padded_tensor",
    "quantized tensors: refused on npu where they are made (ops/quantized.cpp)":
        r"quantiz|q_scale|q_zero_point|q_per_channel|qscheme|int_repr|dequantize\.tensors",
    "CUDA's fused attention kernels: scaled_dot_product_attention on npu takes the math path":
        r"_flash_attention|_efficient_attention|_scaled_dot_product_(flash_attention|efficient_attention)"
        r"|_fill_mem_eff_dropout_mask_",
    "depthwise convolutions ATen picks for CUDA only: npu gets convolution_overrideable (ops/convolution.cpp)":
        r"_conv_depthwise2d|conv_depthwise3d",
    "CUDA's legacy fused dropout: dropout on npu is native_dropout (ops/dropout.cpp)": r"_fused_dropout|_masked_scale",
    "CUDA-only GEMMs that users call by name (out_dtype=, int4 and mixed-dtype weights, grouped scaled mm)":
        r"^aten::(mm|bmm|addmm|baddbmm)\.dtype|int4pack|_mixed_dtypes_linear|_scaled_grouped_mm",
    "MPS's own composites' pieces": r"^aten::(linear_backward|matmul_backward|max_pool2d_backward)$",
    "CUDA's philox random-key ops, called by name only": r"_philox_",
    "CTC-loss backend queries, asked only for CUDA and ROCm tensors": r"_use_(cudnn|miopen)_ctc_loss",
    "CUDA's fused RMS norm backward: rms_norm on npu takes its composite": r"_fused_rms_norm_backward",
    "a functionalization helper that no device has a kernel for": r"^aten::_resize_output_$",
}
AUDIT = """
import torch, torch_npu
for name in torch._C._dispatch_get_all_op_names():
    if name.startswith("aten::") and not any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key) for key in (
            "CPU", "PrivateUse1", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
            "CompositeExplicitAutogradNonFunctional")):
        print(name)
"""


def test_no_device_only_op_is_left_without_a_reason():
    missing = run_python(AUDIT).lines
    assert len(missing) > 50, missing  # the audit sees the CUDA-only ops at all
    for name in ("aten::_thnn_fused_lstm_cell", "aten::batch_norm_stats"):
        assert name not in missing  # implemented here
    unexplained = [n for n in missing if not any(re.search(p, n) for p in NEEDS_NO_NPU_KERNEL.values())]
    assert not unexplained, f"ops with no CPU or npu kernel that nothing here explains: {unexplained}"
