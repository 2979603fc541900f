"""MindSpeed's op builders against softnpu's torch_npu C++ API (issue 34 item 3; tests/clients/mindspeed_ops):
MindSpeed's MoeTokenPermute, MoeTokenUnpermute and RotaryPositionEmbedding builders compile their C++ against
torch_npu/include, link -ltorch_npu -lascendcl, and call aclnnMoeTokenPermute/Unpermute(+Grad) and
aclnnRotaryPositionEmbedding(+Grad) from libopapi.so through their ACLNN_CMD; run on npu, forward and backward equal
the CPU reference. MindSpeed is not on PyPI: MINDSPEED_SOURCE names a checkout or git clone of it (`make
mindspeed-ops MINDSPEED_SOURCE=...` also surveys every builder); without it those tests skip. The same aclnn operators
called as MindSpeed's ACLNN_CMD calls them (here through ctypes) run without it, in make test."""
import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch_npu  # noqa: F401  (loads libopapi.so)

RUN = Path(__file__).resolve().parent / "clients" / "mindspeed_ops" / "run.py"
SOURCE = os.environ.get("MINDSPEED_SOURCE")
# bfloat16 results (MindSpeed's MoE ops take bfloat16 only) against a float32 reference; float32 for the rotary op.
BF16_TOLERANCE = 1e-2
FP32_TOLERANCE = 1e-5

needs_source = pytest.mark.skipif(not SOURCE, reason="MINDSPEED_SOURCE (a MindSpeed checkout or clone) is not set")


@pytest.fixture(scope="module")
def results():
    """The build-and-run cases, in a process of their own (the builders register ops in torch.ops.mindspeed)."""
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(RUN.parents[3] / "build" / "mindspeed" / "torch_extensions"))
    proc = subprocess.run([sys.executable, str(RUN), "--source", SOURCE, "--no-survey"], capture_output=True,
                          text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {r["case"].split(" ")[0]: r for r in map(json.loads, filter(None, proc.stdout.splitlines()))}


@needs_source
def test_moe_token_permute_and_unpermute_match_cpu(results):
    diffs = results["moe_token_permute+unpermute"]["rel_diff"]
    assert diffs["permuted"] == 0.0, diffs  # a row copy: exact
    assert max(diffs.values()) <= BF16_TOLERANCE, diffs


@needs_source
def test_rotary_position_embedding_matches_cpu(results):
    diffs = results["rotary_position_embedding"]["rel_diff"]
    assert max(diffs.values()) <= FP32_TOLERANCE, diffs


@needs_source
def test_fused_adamw_v2_matches_torch_adamw(results):
    diffs = results["fused_adamw_v2"]["rel_diff"]
    assert max(diffs.values()) <= FP32_TOLERANCE, diffs


# ---- the aclnn operators MindSpeed's builders call, through libopapi.so as their ACLNN_CMD calls them.

ACL_TYPES = {torch.float32: 0, torch.int32: 3, torch.int64: 9}
VOID_P = ctypes.c_void_p


@pytest.fixture(scope="module")
def opapi():
    lib = ctypes.CDLL("libopapi.so")
    lib.aclCreateTensor.restype = VOID_P
    lib.aclCreateTensor.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_uint64, ctypes.c_int,
                                    ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_int,
                                    ctypes.POINTER(ctypes.c_int64), ctypes.c_uint64, VOID_P]
    lib.aclDestroyTensor.argtypes = [VOID_P]
    return lib


def call(lib, name, argtypes, *args):
    """aclnnXxxGetWorkspaceSize(args..., &size, &executor), then aclnnXxx on the current stream; the descriptors are
    created from npu tensors (None stays a null pointer) and destroyed after."""
    handles = []

    def descriptor(t):
        dims = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
        strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
        storage = (ctypes.c_int64 * 1)(t.untyped_storage().nbytes() // t.element_size())
        handle = lib.aclCreateTensor(dims, t.dim(), ACL_TYPES[t.dtype], strides, t.storage_offset(), 2, storage, 1,
                                     t.untyped_storage().data_ptr())
        handles.append(handle)
        return handle

    converted = [descriptor(a) if isinstance(a, torch.Tensor) else a for a in args]
    size, executor = ctypes.c_uint64(), VOID_P()
    first = getattr(lib, name + "GetWorkspaceSize")
    first.argtypes = argtypes + [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(VOID_P)]
    assert first(*converted, ctypes.byref(size), ctypes.byref(executor)) == 0, name
    second = getattr(lib, name)
    second.argtypes = [VOID_P, ctypes.c_uint64, VOID_P, VOID_P]
    assert second(None, size, executor, torch.npu.current_stream().native_handle) == 0, name
    for handle in handles:
        lib.aclDestroyTensor(handle)


def test_aclnn_moe_token_permute_family_matches_cpu(opapi):
    torch.manual_seed(2)
    tokens, indices, probs = torch.randn(10, 16), torch.randint(0, 4, (10, 3)), torch.rand(10, 3)
    permuted, sorted_indices = torch.empty(30, 16).npu(), torch.empty(30, dtype=torch.int32).npu()
    call(opapi, "aclnnMoeTokenPermute", [VOID_P, VOID_P, ctypes.c_int64, ctypes.c_bool, VOID_P, VOID_P],
         tokens.npu(), indices.npu(), 30, False, permuted, sorted_indices)
    order = torch.argsort(indices.reshape(-1), stable=True)
    torch.testing.assert_close(permuted.cpu(), tokens[order // 3], rtol=0, atol=0)
    positions = torch.empty_like(order)
    positions[order] = torch.arange(30)
    assert torch.equal(sorted_indices.cpu().long(), positions)

    out = torch.empty(10, 16).npu()
    call(opapi, "aclnnMoeTokenUnpermute", [VOID_P, VOID_P, VOID_P, ctypes.c_bool, VOID_P, VOID_P],
         permuted, sorted_indices, probs.npu(), False, None, out)
    torch.testing.assert_close(out.cpu(), tokens * probs.sum(1, keepdim=True))

    grad = torch.randn(30, 16)
    grad_tokens = torch.empty(10, 16).npu()
    call(opapi, "aclnnMoeTokenPermuteGrad", [VOID_P, VOID_P, ctypes.c_int64, ctypes.c_bool, VOID_P],
         grad.npu(), sorted_indices, 3, False, grad_tokens)
    torch.testing.assert_close(grad_tokens.cpu(), grad[positions].view(10, 3, 16).sum(1))

    grad_out = torch.randn(10, 16)
    grad_permuted, grad_probs = torch.empty(30, 16).npu(), torch.empty(10, 3).npu()
    call(opapi, "aclnnMoeTokenUnpermuteGrad", [VOID_P] * 4 + [ctypes.c_bool, VOID_P, VOID_P, VOID_P],
         permuted, grad_out.npu(), sorted_indices, probs.npu(), False, None, grad_permuted, grad_probs)
    expected = torch.empty(30, 16)
    expected[positions] = (grad_out.unsqueeze(1) * probs.unsqueeze(-1)).reshape(30, 16)
    torch.testing.assert_close(grad_permuted.cpu(), expected)
    torch.testing.assert_close(grad_probs.cpu(), (tokens * grad_out).sum(-1, keepdim=True).expand(10, 3))


def test_aclnn_rotary_position_embedding_matches_cpu(opapi):
    torch.manual_seed(3)
    x, cos, sin = torch.randn(2, 6, 3, 16), torch.randn(1, 6, 1, 16), torch.randn(1, 6, 1, 16)
    y = torch.empty_like(x).npu()
    call(opapi, "aclnnRotaryPositionEmbedding", [VOID_P, VOID_P, VOID_P, ctypes.c_int64, VOID_P],
         x.npu(), cos.npu(), sin.npu(), 0, y)
    xr, cr, sr = (t.clone().requires_grad_() for t in (x, cos, sin))
    ref = xr * cr + torch.cat([-xr[..., 8:], xr[..., :8]], -1) * sr
    torch.testing.assert_close(y.cpu(), ref.detach())
    dy = torch.randn_like(x)
    ref.backward(dy)
    dx, dcos, dsin = torch.empty_like(x).npu(), torch.empty_like(cos).npu(), torch.empty_like(sin).npu()
    call(opapi, "aclnnRotaryPositionEmbeddingGrad", [VOID_P] * 4 + [ctypes.c_int64] + [VOID_P] * 3,
         dy.npu(), cos.npu(), sin.npu(), x.npu(), 0, dx, dcos, dsin)
    torch.testing.assert_close(dx.cpu(), xr.grad)
    torch.testing.assert_close(dcos.cpu(), cr.grad)
    torch.testing.assert_close(dsin.cpu(), sr.grad)


@pytest.mark.parametrize("amsgrad", [False, True])
def test_aclnn_apply_adam_w_v2_matches_torch_adamw(opapi, amsgrad):
    """Two steps as MindSpeed's npu_apply_fused_adamw_v2 takes them (the step count before each step) against
    torch.optim.AdamW."""
    torch.manual_seed(4)
    param = torch.randn(8, 16)
    ref = param.clone().requires_grad_()
    optimizer = torch.optim.AdamW([ref], lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.2, amsgrad=amsgrad)
    var, m, v, max_v = param.npu(), *(torch.zeros(8, 16).npu() for _ in range(3))
    argtypes = [VOID_P] * 6 + [ctypes.c_float] * 5 + [ctypes.c_bool, ctypes.c_bool]
    for taken in range(2):
        grad = torch.randn(8, 16)
        ref.grad = grad
        optimizer.step()
        call(opapi, "aclnnApplyAdamWV2", argtypes, var, m, v, max_v if amsgrad else None, grad.npu(),
             torch.tensor([taken]).npu(), 0.05, 0.8, 0.95, 0.2, 1e-6, amsgrad, False)
    torch.testing.assert_close(var.cpu(), ref.detach())
    torch.testing.assert_close(m.cpu(), optimizer.state[ref]["exp_avg"])
    torch.testing.assert_close(v.cpu(), optimizer.state[ref]["exp_avg_sq"])
