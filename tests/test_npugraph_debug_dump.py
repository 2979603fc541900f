"""NPUGraph.debug_dump (torch_npu's): the captured graph's nodes as a Chrome trace, in launch order with their task
groups, and the aligned trace beside it (softnpu/npu/_npugraph_utils.py)."""

import json
from unittest import mock

import pytest
import torch
import torch_npu  # noqa: F401


def captured_graph():
    x = torch.ones(8, device="npu")
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph):
        stream = torch.npu.current_stream()
        y = x * 2
        torch.npu.graph_task_group_begin(stream)
        y.add_(1)
        torch.npu.graph_task_group_end(stream)
    return graph, y, stream


def test_debug_dump_writes_the_nodes_and_the_aligned_trace(tmp_path):
    graph, y, stream = captured_graph()
    path = tmp_path / "graph.json"
    graph.debug_dump(str(path))
    events = json.loads(path.read_text())
    assert [(e["name"], e["args"]["Task Type"], e["args"]["Task Group"]) for e in events] == [
        ("aten::mul.Tensor", "KERNEL", 0), ("aten::add_.Tensor", "KERNEL", 1)]
    assert {e["tid"] for e in events} == {f"stream{stream.stream_id}"}
    aligned = json.loads((tmp_path / "graph.aligned.json").read_text())
    assert [(e["name"], e["ts"]) for e in aligned] == [("aten::mul.Tensor", 0.0), ("aten::add_.Tensor", 1.2)]
    graph.replay()
    assert y.cpu().tolist() == [3.0] * 8  # dumping leaves the graph as it was


def test_debug_dump_without_a_capture_or_when_alignment_fails(tmp_path):
    path = tmp_path / "graph.json"
    path.write_text("kept")
    with pytest.warns(UserWarning, match="without a preceding successful capture"):
        assert torch.npu.NPUGraph().debug_dump(str(path)) is None
    assert path.read_text() == "kept"

    graph, _, _ = captured_graph()
    with mock.patch("torch_npu.npu._npugraph_utils.align_trace_json", side_effect=RuntimeError("failed")) as align:
        graph.debug_dump(str(path))
    align.assert_called_once_with(str(path), None)
    assert len(json.loads(path.read_text())) == 2 and not (tmp_path / "graph.aligned.json").exists()
    with pytest.raises(ValueError, match="merge_gap"):
        torch_npu.npu._npugraph_utils.align_trace_json(str(path), None, merge_gap=-1)
