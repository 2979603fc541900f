"""ACL graph update plans (torch_npu.npu._aclgraph_update_plan, torch_npu._inductor._aclgraph_update_plan): a captured
graph's attention ops take new sequence lengths at replay from the plan's sources, in an eager NPUGraph capture and
in torch.compile(mode="reduce-overhead")'s graphs, where Inductor writes the plan beside the compiled graph.

Every replay is compared with the eager call of the same op on the same inputs and lengths, read back."""

import pytest
import torch
import torch_npu
from torch_npu._inductor._aclgraph_update_plan.codegen import build_aclgraph_update_plan_entry_for_inductor
from torch_npu.npu._aclgraph_update_plan import (
    ACLGRAPH_UPDATE_PLAN_GLOBAL,
    build_cpu_update_input_for_graph,
    update_aclgraph_records_for_graph,
    validate_aclgraph_update_plan,
)

IFA_V1 = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.3, softmax_lse_flag=True)
IFA_V2 = dict(num_query_heads=4, num_key_value_heads=2, input_layout="BNSD", softmax_scale=0.3,
              return_softmax_lse=True)


def qkv(b=2, n=4, n2=2, sq=1, skv=9, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).half().npu() for shape in ((b, n, sq, d), (b, n2, skv, d), (b, n2, skv, d))]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_eager_capture_replays_the_lengths_the_plan_resolves(version):
    if version == "v1":
        op, kwargs, key = torch_npu.npu_fused_infer_attention_score, IFA_V1, "actual_seq_lengths_kv"
    else:
        op, kwargs, key = torch_npu.npu_fused_infer_attention_score_v2, IFA_V2, "actual_seq_kvlen"
    q, k, v = qkv()
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph, auto_dispatch_capture=True):
        out, lse = op(q, k, v, **kwargs, **{key: [2, 3]})
    # The lengths are the call's input 1; the second batch's kv length is a constant of the plan.
    plan = [{"op": f"{op.__name__}.default",
             "updates": {key: {"kind": "list", "items": [{"kind": "input", "index": 1}, {"kind": "constant",
                                                                                       "value": 5}]}}}]
    records = graph.graph_dispatch_mode.graph_dispatch_records
    assert [r.op_cache_entry.__name__ for r in records] == [f"{op.__name__}.out"]
    for first in (9, 1, 4):
        update = build_cpu_update_input_for_graph(plan, [q, first], records)
        assert update == [{key: [first, 5]}]
        assert update_aclgraph_records_for_graph(update, graph)
        graph.replay()
        want_out, want_lse = op(q, k, v, **kwargs, **{key: [first, 5]})
        assert torch.equal(out.cpu(), want_out.cpu()) and torch.equal(lse.cpu(), want_lse.cpu())
        cpu_out, _ = op(q.cpu(), k.cpu(), v.cpu(), **kwargs, **{key: [first, 5]})
        torch.testing.assert_close(out.cpu(), cpu_out, atol=2e-3, rtol=2e-3)


def test_plan_checked_against_what_the_capture_recorded():
    q, k, v = qkv()
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph, auto_dispatch_capture=True):
        torch_npu.npu_fused_infer_attention_score(q, k, v, **IFA_V1, actual_seq_lengths_kv=[2, 3])
    records = graph.graph_dispatch_mode.graph_dispatch_records
    ok = {"actual_seq_lengths_kv": {"kind": "constant", "value": [4, 4]}}
    validate_aclgraph_update_plan([{"op": "npu_fused_infer_attention_score.default", "updates": ok}], records)
    for plan, match in [([], "missing ACLGraph update plan"),
                        ([{"op": "npu_fused_infer_attention_score_v2.default", "updates": ok}], "op mismatch"),
                        ([{"op": "npu_fused_infer_attention_score.default",
                           "updates": {"context_lens": {"kind": "none"}}}], "cannot consume"),
                        ([{"op": "npu_fused_infer_attention_score.default",
                           "updates": {"actual_seq_lengths_kv": {"kind": "constant", "value": k}}}],
                         "unsupported constant")]:
        with pytest.raises(RuntimeError, match=match):
            validate_aclgraph_update_plan(plan, records)
    with pytest.raises(RuntimeError, match="out of range"):
        build_cpu_update_input_for_graph([{"op": "npu_fused_infer_attention_score.default", "updates": {
            "actual_seq_lengths_kv": {"kind": "input", "index": 2}}}], [q], records)


def test_inductor_entry_binds_lengths_by_schema():
    op = torch.ops.npu.npu_fused_infer_attention_score.default
    entry = build_aclgraph_update_plan_entry_for_inductor(op, ["q", "k", "v"], {"actual_seq_lengths": [15],
                                                                              "num_heads": 4}, [], {})
    assert entry == {"op": "npu_fused_infer_attention_score.default",
                     "updates": {"actual_seq_lengths": {"kind": "list",
                                                        "items": [{"kind": "constant", "value": 15}]}}}
    assert build_aclgraph_update_plan_entry_for_inductor(torch.ops.aten.mm.default, ["a", "b"], {}, [], {}) is None


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def attention(q, k, v):
    out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, **IFA_V1, actual_seq_lengths_kv=[6, 3])
    return out * 2


def _recorded_graphs():
    """The NPU graphs reduce-overhead's graph trees recorded on npu:0 (and keep), in recording order."""
    from torch_npu.npu import _graph_tree

    manager = _graph_tree.get_manager(0, create_if_none_exists=False)
    nodes, todo = [], list(manager.get_roots()) if manager else []
    while todo:
        nodes.append(todo.pop())
        todo.extend(child for children in nodes[-1].children.values() for child in children)
    return [node.graph for node in sorted(nodes, key=lambda node: node.id.id)]


def test_reduce_overhead_applies_inductors_plan_at_each_replay(fresh_dynamo):
    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(attention, mode="reduce-overhead", fullgraph=True)
    inputs = qkv(seed=1)
    _, (code, *_) = run_and_get_code(compiled, *inputs)
    assert code.count(f".call.{ACLGRAPH_UPDATE_PLAN_GLOBAL} = ") == 1  # Runner.call (graph partitions are on)
    assert "'actual_seq_lengths_kv': {'kind': 'list', 'items': [{'kind': 'constant', 'value': 6}" in code
    graphs_before = len(_recorded_graphs())
    updates = []
    update = torch.npu.NPUGraph.update

    def spy(graph, cpu_update_input):
        updates.append(cpu_update_input)
        update(graph, cpu_update_input)

    torch.npu.NPUGraph.update = spy
    try:
        for seed in (2, 3, 4):  # the second call records, the others replay
            inputs = qkv(seed=seed)
            got = compiled(*inputs).cpu()
            assert torch.equal(got, attention(*inputs).cpu())
    finally:
        torch.npu.NPUGraph.update = update
    assert len(_recorded_graphs()) == graphs_before + 1
    records = _recorded_graphs()[-1].graph_dispatch_mode.graph_dispatch_records
    assert [r.op_cache_entry.__name__ for r in records] == ["npu_fused_infer_attention_score.out"]
    # Applied at the recording (the lengths left None are the plan's None sources); the replays' resolved updates
    # equal it, so they are not relaunched.
    assert updates == [[{"actual_seq_lengths": None, "actual_seq_lengths_kv": [6, 3]}]]


def attention_of_lengths(q, k, v, lengths):
    out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, **IFA_V1, actual_seq_lengths_kv=lengths)
    return out


def test_reduce_overhead_plan_of_each_length_list(fresh_dynamo):
    # As torch_npu's Inductor tests: new lengths compile a graph whose plan holds them. Dynamo makes the lengths
    # dynamic at the second list; the op's Meta kernel specializes them, as it checks their values.
    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(attention_of_lengths, mode="reduce-overhead", fullgraph=True)
    q, k, v = qkv(seed=5)
    for lengths in ([7, 3], [2, 9], [4, 4]):
        _, (code, *_) = run_and_get_code(compiled, q, k, v, lengths)
        assert f"'items': [{{'kind': 'constant', 'value': {lengths[0]}}}" in code
        for _ in range(2):  # records, then replays
            assert torch.equal(compiled(q, k, v, lengths).cpu(), attention_of_lengths(q, k, v, lengths).cpu())
