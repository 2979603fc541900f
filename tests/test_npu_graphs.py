"""NPU graphs, as torch.cuda's: a captured training step replays with the results of the same steps run eagerly,
random ops draw fresh numbers on each replay, calls that make the host wait raise during capture (synchronizations
also invalidate it), graphs share a memory pool, make_graphed_callables matches eager, replay is asynchronous."""

import copy

import pytest
import torch
import torch.nn.functional as F

from conftest import run_many


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=False)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_captured_training_step_replays_as_eager():
    graphed, eager = mlp().npu(), mlp().npu()
    opt_g = torch.optim.SGD(graphed.parameters(), lr=0.05, momentum=0.9)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    static_x = torch.randn(8, 16, device="npu")
    static_y = torch.randn(8, 4, device="npu")
    # Warm-up on the stream the capture will use, as torch.cuda's docs do (lazy state is created outside capture).
    side = torch.npu.Stream()
    side.wait_stream(torch.npu.current_stream())
    with torch.npu.stream(side):
        for _ in range(2):
            train_step(graphed, opt_g, static_x, static_y)
    torch.npu.current_stream().wait_stream(side)
    for _ in range(2):
        train_step(eager, opt_e, static_x, static_y)

    g = torch.npu.NPUGraph()
    with torch.npu.graph(g, stream=side):
        static_loss = train_step(graphed, opt_g, static_x, static_y)
    assert g._node_count() > 10
    for p, q in zip(graphed.parameters(), eager.parameters()):  # capture ran nothing
        torch.testing.assert_close(p, q)

    for i in range(4):
        x, y = torch.randn(8, 16, device="npu"), torch.randn(8, 4, device="npu")
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        loss = train_step(eager, opt_e, x, y)
        torch.testing.assert_close(static_loss.cpu(), loss.cpu())
    assert g._replay_count() == 4
    for p, q in zip(graphed.parameters(), eager.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu())
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu())


def test_dropout_draws_fresh_numbers_on_each_replay():
    x = torch.ones(4096, device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        out = F.dropout(x, p=0.5)
    masks = []
    for _ in range(3):
        g.replay()
        masks.append(out.cpu() != 0)
        assert set(out.cpu().unique().tolist()) == {0.0, 2.0}
        assert 0.4 < masks[-1].float().mean().item() < 0.6
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    # The npu generator drives the replays: the same seed gives the same numbers.
    torch.npu.manual_seed(123)
    g.replay()
    first = out.cpu()
    torch.npu.manual_seed(123)
    g.replay()
    assert torch.equal(first, out.cpu())


# Calls the op path refuses during capture (they would make the host wait): as on Ascend, the runtime rejects them
# without invalidating the capture, so the graph captured around them replays.
REFUSED = {
    "item": lambda x: x.sum().item(),
    "data-dependent op": lambda x: x.nonzero(),
    "copy to the host": lambda x: x.cpu(),
}
# Synchronizations of the device or of the capturing stream invalidate the capture, as CUDA's.
INVALIDATING = {
    "synchronize": lambda x: torch.npu.synchronize(),
    "stream synchronize": lambda x: torch.npu.current_stream().synchronize(),
}


@pytest.mark.parametrize("call", REFUSED, ids=list(REFUSED))
def test_host_waits_during_capture_raise_and_the_capture_goes_on(call):
    x = torch.arange(6.0, device="npu")
    s = torch.npu.Stream()
    g = torch.npu.NPUGraph()
    with torch.npu.stream(s):
        g.capture_begin()
        y = x * 2
        with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
            REFUSED[call](y)
        z = y + 1
        g.capture_end()
    torch.npu.current_stream().wait_stream(s)
    x.fill_(1.0)
    g.replay()
    assert z.cpu().tolist() == [3.0] * 6


@pytest.mark.parametrize("call", INVALIDATING, ids=list(INVALIDATING))
def test_synchronizations_during_capture_raise_and_invalidate(call):
    x = torch.arange(6.0, device="npu")
    g = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
        with torch.npu.graph(g):
            y = x * 2
            INVALIDATING[call](y)
    assert not torch.npu.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    # Nothing was lost: eager work goes on.
    assert (x * 2).sum().item() == 30.0


def test_capture_end_reports_the_invalidation():
    x = torch.ones(3, device="npu")
    s = torch.npu.Stream()
    g = torch.npu.NPUGraph()
    with torch.npu.stream(s):
        g.capture_begin()
        assert torch.npu.is_current_stream_capturing()
        with pytest.raises(RuntimeError, match="snpuStreamSynchronize.*not permitted when stream is capturing"):
            s.synchronize()
        with pytest.raises(RuntimeError, match="invalidated"):
            x + 1  # later launches on the invalidated capture fail
        with pytest.raises(RuntimeError, match="invalidated"):
            g.capture_end()
    assert not torch.npu.is_current_stream_capturing()


def test_capture_on_the_default_stream_is_refused():
    with pytest.raises(RuntimeError, match="non-default stream"):
        torch.npu.NPUGraph().capture_begin()


def test_graphs_share_a_pool():
    x = torch.arange(8.0, device="npu")
    pool = torch.npu.graph_pool_handle()
    g1, g2 = torch.npu.NPUGraph(), torch.npu.NPUGraph()
    with torch.npu.graph(g1, pool=pool):
        a = x * 2
    with torch.npu.graph(g2, pool=g1.pool()):
        b = a + 1
    assert g1.pool() == g2.pool() == pool
    addresses = {blk["address"] for seg in torch.npu.memory_snapshot(pool) for blk in seg["blocks"]
                 if blk["state"] == "active_allocated"}
    assert {a.data_ptr(), b.data_ptr()} <= addresses  # allocated during capture: from the shared pool
    x.copy_(torch.arange(8.0, 16.0))
    g1.replay()
    g2.replay()
    torch.testing.assert_close(b.cpu(), torch.arange(8.0, 16.0) * 2 + 1)
    # The pool lives as long as its graphs (and tensors): then its memory goes back to the device.
    g1.reset()
    assert torch.npu.memory_snapshot(pool)
    g2.reset()
    del a, b
    torch.npu.synchronize()
    assert torch.npu.memory_snapshot(pool) == []


def test_make_graphed_callables_matches_eager():
    module = mlp().npu()
    eager = copy.deepcopy(module)
    sample = torch.randn(8, 16, device="npu", requires_grad=True)
    graphed = torch.npu.make_graphed_callables(module, (sample,))
    outputs = set()
    for _ in range(3):
        x = torch.randn(8, 16, device="npu")
        xg, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        out_g, out_e = graphed(xg), eager(xe)
        outputs.add(out_g.data_ptr())
        torch.testing.assert_close(out_g.cpu(), out_e.cpu())
        out_g.square().sum().backward()
        out_e.square().sum().backward()
        torch.testing.assert_close(xg.grad.cpu(), xe.grad.cpu())
    for p, q in zip(module.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu())
    assert len(outputs) == 1  # replayed: every call returns the graph's static output

    def fn(a, b):
        return (a * b).sin()

    a = torch.randn(5, device="npu", requires_grad=True)
    b = torch.randn(5, device="npu")
    graphed_fn = torch.npu.make_graphed_callables(fn, (a, b))
    a2, b2 = torch.randn(5, device="npu", requires_grad=True), torch.randn(5, device="npu")
    out = graphed_fn(a2, b2)
    torch.testing.assert_close(out.cpu(), fn(a2, b2).detach().cpu())
    out.sum().backward()
    torch.testing.assert_close(a2.grad.cpu(), (b2 * (a2 * b2).cos()).detach().cpu())


def test_replay_is_asynchronous():
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        torch.npu._sleep(500_000_000)
    done = torch.npu.Event()
    g.replay()  # one launch: the host is back while the recorded work runs
    done.record()
    assert not done.query()
    done.synchronize()
    assert done.query()


def _recorded_graphs():
    """The NPU graphs reduce-overhead's graph trees recorded on npu:0 (and keep), in recording order."""
    from torch_npu.npu import _graph_tree

    manager = _graph_tree.get_manager(0, create_if_none_exists=False)
    nodes, todo = [], list(manager.get_roots()) if manager else []
    while todo:
        nodes.append(todo.pop())
        todo.extend(child for children in nodes[-1].children.values() for child in children)
    return [node.graph for node in sorted(nodes, key=lambda node: node.id.id)]


def test_reduce_overhead_compile_replays_npu_graphs():
    module = mlp().npu()
    eager = copy.deepcopy(module)
    compiled = torch.compile(module, mode="reduce-overhead")
    opt_c = torch.optim.SGD(module.parameters(), lr=0.1)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    before = len(_recorded_graphs())
    for _ in range(4):
        x = torch.randn(8, 16, device="npu")
        loss_c = compiled(x).square().mean()
        loss_c.backward()
        opt_c.step()
        opt_c.zero_grad()
        loss_e = eager(x).square().mean()
        loss_e.backward()
        opt_e.step()
        opt_e.zero_grad()
        torch.testing.assert_close(loss_c.cpu(), loss_e.cpu())
    for p, q in zip(module.parameters(), eager.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu())
    graphs = _recorded_graphs()[before:]
    # Forward and backward each: a warm-up call, then a capture (which replays) and replays.
    assert [g._replay_count() for g in graphs] == [3, 3]


def test_freeing_a_released_pool_during_another_capture_waits_for_the_capture():
    x = torch.ones(1024, device="npu")
    g1 = torch.npu.NPUGraph()
    with torch.npu.graph(g1):
        kept = x * 2
    g1.replay()
    g1.reset()  # its pool is released; `kept` holds its last segment
    g2 = torch.npu.NPUGraph()
    with torch.npu.graph(g2):
        y = x + 1
        del kept  # the released pool's segment would be freed now, which would wait for the device
    g2.replay()
    torch.testing.assert_close(y.cpu(), torch.full((1024,), 2.0))


# torch.compile(mode="reduce-overhead") runs on the NPU graph trees (softnpu/inductor/npu_graphs.py): CUDA graph trees' contract.

def _cache_step(cache, x, pos):
    cache.index_copy_(0, pos, x)
    return cache.sum()


def _fill_cache(f, cache):
    for i in range(4):
        out = f(cache, torch.full((1,), i + 1.0, device="npu"), torch.tensor([i], device="npu"))
    torch.npu.synchronize()
    return cache.cpu().tolist(), float(out)


def _eager_cache():
    cache = torch.zeros(4)
    return _fill_cache(_cache_step, cache.npu())


def test_reduce_overhead_records_again_when_a_static_input_moves():
    torch._dynamo.reset()
    f = torch.compile(_cache_step, mode="reduce-overhead", fullgraph=True)
    before = len(_recorded_graphs())
    caches = []
    for _ in range(2):
        caches.append(torch.zeros(4, device="npu"))  # both kept: the second cache has another address
        torch._dynamo.mark_static_address(caches[-1])
        assert _fill_cache(f, caches[-1]) == _eager_cache() == ([1.0, 2.0, 3.0, 4.0], 10.0)
    # One recording per cache address (the first after the warm-up call); every other call replays one of them.
    graphs = _recorded_graphs()[before:]
    assert len(graphs) == 2
    assert [g._replay_count() for g in graphs] == [3, 4]


def test_reduce_overhead_replays_the_recording_of_a_freed_inputs_address_only_for_the_tensor_now_there():
    torch._dynamo.reset()
    f = torch.compile(_cache_step, mode="reduce-overhead", fullgraph=True)
    before = len(_recorded_graphs())
    cache = torch.zeros(4, device="npu")
    torch._dynamo.mark_static_address(cache)
    _fill_cache(f, cache)
    freed = cache.data_ptr()
    del cache  # nothing of softnpu's keeps it: its block goes back to the allocator
    # Allocate until the caching allocator hands that block out again (free blocks are taken in address order).
    held = []
    while (cache := torch.zeros(4, device="npu")).data_ptr() != freed:
        held.append(cache)
        assert len(held) < 4096, "the freed block was never handed out again: something still holds it"
    torch._dynamo.mark_static_address(cache)
    assert _fill_cache(f, cache) == _eager_cache()
    # The recording made at that address serves the new tensor there: no second recording.
    assert len(_recorded_graphs()) - before == 1


def test_reduce_overhead_does_not_record_a_graph_that_mutates_an_input_it_would_copy():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    f = torch.compile(_cache_step, mode="reduce-overhead", fullgraph=True)
    before, skips = len(_recorded_graphs()), counters["inductor"]["cudagraph_skips"]
    for _ in range(2):
        assert _fill_cache(f, torch.zeros(4, device="npu")) == _eager_cache()
    assert len(_recorded_graphs()) == before  # run as compiled, never recorded (CUDA's check_for_mutation)
    assert counters["inductor"]["cudagraph_skips"] > skips


def test_reduce_overhead_records_a_moved_static_input_again_past_the_rerecord_limit():
    # CUDA graph trees' rule: a static input (mark_static_address, parameters) at a new address records again without
    # counting toward triton.cudagraph_unexpected_rerecord_limit (their identity churns with inlined nn modules).
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    f = torch.compile(_cache_step, mode="reduce-overhead", fullgraph=True)
    before, skips = len(_recorded_graphs()), counters["inductor"]["cudagraph_skips"]
    caches = []
    with torch._inductor.config.patch({"triton.cudagraph_unexpected_rerecord_limit": 2}):
        for _ in range(4):
            caches.append(torch.zeros(4, device="npu"))
            torch._dynamo.mark_static_address(caches[-1])
            assert _fill_cache(f, caches[-1]) == _eager_cache()
    assert len(_recorded_graphs()) - before == 4
    assert counters["inductor"]["cudagraph_skips"] == skips


# A user's capture: what torch.cuda's documentation promises of CUDA graphs.

def test_captured_in_place_update_of_an_input_repeats_on_every_replay():
    # "Replay ... reads and writes the same memory": an in-place op on a tensor made before capture writes it on
    # every replay.
    static = torch.arange(6.0, device="npu")
    step = torch.full((6,), 0.5, device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        static.mul_(2).add_(step)
    expected = torch.arange(6.0)
    for _ in range(3):
        g.replay()
        expected = expected * 2 + 0.5
    torch.testing.assert_close(static.cpu(), expected)


def test_memory_a_capture_freed_stays_the_graphs():
    # The capture's allocations come from its private pool; one freed during capture is not handed to eager tensors
    # afterwards, so a replay cannot overwrite them.
    x = torch.ones(1 << 16, device="npu")
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        tmp = x * 3
        out = tmp + 1
        del tmp
    eager = [torch.full((1 << 16,), -1.0, device="npu") for _ in range(4)]
    x.fill_(2)
    g.replay()
    torch.testing.assert_close(out.cpu(), torch.full((1 << 16,), 7.0))
    for t in eager:
        torch.testing.assert_close(t.cpu(), torch.full((1 << 16,), -1.0))


def test_pinned_memory_allocated_during_capture_stays_the_graphs():
    s = torch.npu.Stream()
    g = torch.npu.NPUGraph()
    dst1, dst2 = torch.zeros(64, device="npu"), torch.zeros(64, device="npu")
    with torch.no_grad(), torch.npu.graph(g, stream=s):
        t1 = torch.full((64,), 3.0).pin_memory()
        dst1.copy_(t1, non_blocking=True)
        del t1  # freed during capture: the graph still reads it
        t2 = torch.full((64,), 5.0).pin_memory()
        dst2.copy_(t2, non_blocking=True)
    t2_ptr = t2.data_ptr()
    del t2
    later = [torch.full((64,), -1.0).pin_memory() for _ in range(16)]
    assert t2_ptr not in {t.data_ptr() for t in later}
    for _ in range(2):
        g.replay()
        assert dst1.cpu().tolist() == [3.0] * 64 and dst2.cpu().tolist() == [5.0] * 64


def test_capture_is_refused_with_pin_memory_expandable_segments():
    # torch_npu's NPUGraph::capture_begin refuses PYTORCH_NPU_ALLOC_CONF=pin_memory_expandable_segments:True (its
    # expandable pinned-memory allocator has no graph pools); False, or no such key, captures.
    code = """
import torch, torch_npu
g = torch.npu.NPUGraph()
try:
    with torch.npu.graph(g, stream=torch.npu.Stream()):
        pass
    print("captured")
except RuntimeError as e:
    print("refused" if "pin_memory_expandable_segments=True" in str(e) else "other: " + str(e))
"""
    results = run_many([(code, {"PYTORCH_NPU_ALLOC_CONF": f"pin_memory_expandable_segments:{flag}"})
                        for flag in ("True", "False")])
    assert [r.lines[-1] for r in results] == ["refused", "captured"]
