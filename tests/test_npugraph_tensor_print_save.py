"""torch_npu's aclgraph DFX ops, torch.ops.npu.print_npugraph_tensor and save_npugraph_tensor: eagerly they print or
save in stream order; captured into an NPU graph, at every replay with what that replay computed (not at capture);
torch_npu's file naming; CPU tensors; argument errors (softnpu/npu/graph_tensor_dump.py, csrc/fused/debug)."""

import os
from unittest import mock

import pytest
import torch
import torch_npu


@pytest.fixture
def printed():
    with mock.patch("builtins.print") as p:
        yield lambda: [c.args[0] for c in p.call_args_list if c.args]


def test_print_eager_waits_for_the_work_queued_before_it(printed):
    x = torch.zeros(2, 3, device="npu")
    torch.npu._sleep(500_000)  # the copy must not read x before the fill behind the sleep
    x.fill_(7.0)
    torch_npu.print_npugraph_tensor(x, tensor_name="x")
    torch.npu.synchronize()
    assert printed() == [f"x={torch.full((2, 3), 7.0)}, shape=(2, 3), dtype=torch.float32"]


def test_print_in_a_graph_prints_each_replays_values(printed):
    x = torch.arange(4, dtype=torch.float32, device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        y = x * 2
        torch.ops.npu.print_npugraph_tensor(y)
    torch.npu.synchronize()
    assert printed() == []  # capture records, it does not print
    for step in (1, 2):
        x.add_(1)
        g.replay()
        torch.npu.synchronize()
        want = (torch.arange(4.0) + step) * 2
        assert printed()[-1] == f"{want}, shape=(4,), dtype=torch.float32"
    assert len(printed()) == 2


def test_save_in_a_graph_writes_the_replays_tensor(tmp_path):
    x = torch.arange(6, dtype=torch.bfloat16, device="npu").reshape(2, 3)
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        y = x.t() + 1  # not contiguous: saved as a contiguous copy
        torch.ops.npu.save_npugraph_tensor(y, save_path=str(tmp_path / "y.bin"))
    x.mul_(3)
    g.replay()
    torch.npu.synchronize()
    index = x.device.index
    assert os.listdir(tmp_path) == [f"y_device_{index}_0.bin"]
    torch.testing.assert_close(torch.load(tmp_path / f"y_device_{index}_0.bin"), torch.arange(6.0).reshape(2, 3).t()
                               .mul(3).add(1).bfloat16(), rtol=0, atol=0)


def test_save_names_count_per_path_unless_overwriting(tmp_path):
    x = torch.ones(3, device="npu")
    index = x.device.index
    for _ in range(2):
        torch.ops.npu.save_npugraph_tensor(x, save_path=str(tmp_path / "a.pt"))
        torch.ops.npu.save_npugraph_tensor(x, save_path=str(tmp_path / "b"), overwrite=True)
    torch.ops.npu.save_npugraph_tensor(x.cpu() * 2, save_path=str(tmp_path / "c.pt"))  # a CPU tensor: no device
    torch.npu.synchronize()
    assert sorted(os.listdir(tmp_path)) == [f"a_device_{index}_0.pt", f"a_device_{index}_1.pt",
                                            f"b_device_{index}.pt", "c_0.pt"]
    assert torch.equal(torch.load(tmp_path / "c_0.pt"), torch.full((3,), 2.0))


def test_save_tensor_list_is_one_list(tmp_path):
    a, b = torch.arange(3, device="npu"), torch.ones(2, 2, dtype=torch.float16, device="npu")
    torch.ops.npu.save_npugraph_tensor.tensor_list([a, b], save_path=str(tmp_path / "ab.pt"), overwrite=True)
    torch.npu.synchronize()
    saved = torch.load(tmp_path / f"ab_device_{a.device.index}.pt")
    assert isinstance(saved, list) and len(saved) == 2
    assert torch.equal(saved[0], a.cpu()) and torch.equal(saved[1], b.cpu())


def test_bad_arguments():
    x = torch.ones(2, device="npu")
    with pytest.raises(ValueError, match="must include a file name"):
        torch.ops.npu.save_npugraph_tensor(x, save_path="somedir/")
    with pytest.raises(NotImplementedError):  # no tensor: no dispatch key, as torch_npu
        torch.ops.npu.save_npugraph_tensor.tensor_list([])
    with pytest.raises(ValueError, match="same device"):
        torch.ops.npu.save_npugraph_tensor.tensor_list([x, x.cpu()])
    with pytest.raises(RuntimeError):
        torch.ops.npu.print_npugraph_tensor(x, tensor_name=3)  # the schema's str?


def test_compiled_code_keeps_the_print(printed):
    # The op returns nothing; as a side-effecting op the traced graph keeps it.
    f = torch.compile(lambda x: torch_npu.print_npugraph_tensor(x * 2, tensor_name="c"), fullgraph=True,
                      backend="aot_eager")
    f(torch.ones(2, device="npu"))
    torch.npu.synchronize()
    assert printed() == [f"c={torch.full((2,), 2.0)}, shape=(2,), dtype=torch.float32"]
