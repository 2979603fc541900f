"""torch_npu's NPUGraph.super_kernel_optimize (options checked as torch_npu's, replay unchanged) and its graph tensor
dump specs (torch_npu.npu.graphs._make_npugraph_tensor_ptr_spec / _materialize_npugraph_tensor_arg)."""

import pytest
import torch
import torch_npu
import torch_npu.npu.graphs as npu_graphs


def test_optimize_then_replay_matches_cpu():
    x = torch.randn(16, 16)
    y = torch.randn(16, 16)
    xn, yn = x.npu(), y.npu()
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        torch_npu.npu.super_kernel_scope_begin("scope")
        out = torch.relu(xn @ yn)
        torch_npu.npu.super_kernel_scope_end("scope")
    g.super_kernel_optimize(
        optimize_options={"preload_code": 1, "stream_fusion": 1, "opt_extend": "x",
                          "dcci_before_kernel_start": ["k"], "ubuf_lock_ignore_kernel": [],
                          "aggressive_opt_strategies": {"event_breaker_bypass": 1}},
        debug_options={"debug_sync_all": 1, "debug_extend": "y"})
    xn.copy_(2 * x)
    g.replay()
    torch.testing.assert_close(out.cpu(), torch.relu((2 * x) @ y), rtol=1e-5, atol=1e-5)


def test_optimize_needs_a_capture():
    g = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.super_kernel_optimize(None, None)
    x = torch.ones(4, device="npu")
    with torch.npu.graph(g):
        x.add_(1)
    g.super_kernel_optimize()
    g.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.super_kernel_optimize()


@pytest.mark.parametrize("optimize, debug, message", [
    ("invalid", None, "optimize_options param must be dict or None"),
    (None, {"preload_code": 1}, "Invalid debug_options param key: 'preload_code'"),
    ({"split_mode": "1"}, None, r"optimize_options param\['split_mode'\] must be int, got str"),
    ({"opt_extend": 1}, None, r"must be str, got int"),
    ({"dcci_after_kernel_end": ["a", None]}, None, r"\['dcci_after_kernel_end'\]\[1\] must be str, got NoneType"),
    ({"aggressive_opt_strategies": {"other": 1}}, None, "Invalid sub_key 'other'"),
    ({"aggressive_opt_strategies": {"task_breaker_bypass": "1"}}, None, "must be int, got str"),
])
def test_invalid_options_raise_with_pta_code(optimize, debug, message):
    g = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match=message) as info:
        g.super_kernel_optimize(optimize_options=optimize, debug_options=debug)
    assert "ERR00001 PTA invalid parameter" in str(info.value)


def test_tensor_ptr_spec_materializes_the_bytes():
    x = torch.arange(12, dtype=torch.float16).reshape(3, 4)
    spec = npu_graphs._make_npugraph_tensor_ptr_spec(x)
    assert spec == (npu_graphs._NPUGRAPH_TENSOR_PTR_SPEC_MARKER, x.data_ptr(), 24, (3, 4), torch.float16)
    got = npu_graphs._materialize_npugraph_tensor_arg([spec])
    assert torch.equal(got[0], x)
    assert got[0].data_ptr() != x.data_ptr()  # a copy taken when the host function runs
    empty = (npu_graphs._NPUGRAPH_TENSOR_BUFFER_SPEC_MARKER, bytearray(), (0, 2), torch.int32)
    assert npu_graphs._materialize_npugraph_tensor_arg(empty).shape == (0, 2)
    assert npu_graphs._materialize_npugraph_tensor_arg("other") == "other"


def test_memory_fraction_errors_carry_pta_codes():
    with pytest.raises(TypeError, match="ERR00002 PTA invalid type"):
        torch.npu.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="ERR00003 PTA invalid value"):
        torch.npu.set_per_process_memory_fraction(1.5)
