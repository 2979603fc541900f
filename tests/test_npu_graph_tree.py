"""NPU graph trees (torch_npu.npu._graph_tree) and the caching allocator's hooks they run on (torch_npu._C._npu_*):
private-pool routing, the live-allocation check, a pool checkpoint restored, trees of recordings replayed against the
CPU, and torch.compile(mode="reduce-overhead") training through them (test_npu_graphs.py has the mode's contract)."""

import pytest
import torch
import torch_npu
from torch._inductor import config

from torch_npu.npu import _graph_tree

C = torch_npu._C


@pytest.fixture
def pool():
    """A graph pool on device 0, released at the end (and the caller's allocations routed back to the default)."""
    torch.npu.synchronize()
    handle = torch.npu.graph_pool_handle()
    C._npu_beginAllocateCurrentThreadToPool(0, handle)
    yield handle
    C._npu_endAllocateToPool(0, handle)
    C._npu_releasePool(0, handle)


def _pool_blocks(handle):
    return [(seg["address"], seg["blocks"]) for seg in torch.npu.memory_snapshot() if seg["segment_pool_id"] == handle]


def test_allocations_go_to_the_pool_until_end(pool):
    a = torch.empty(1000, device="npu")
    C._npu_endAllocateToPool(0, pool)
    b = torch.empty(1000, device="npu")
    C._npu_beginAllocateCurrentThreadToPool(0, pool)  # the fixture ends once more
    C._npu_releasePool(0, pool)  # ... and releases once more
    addrs = _graph_tree.get_block_addrs(pool)
    assert a.data_ptr() in addrs
    assert b.data_ptr() not in addrs


def test_check_pool_live_allocations(pool):
    a = torch.empty(100, device="npu")
    b = torch.empty(5000, device="npu")
    assert C._npu_checkPoolLiveAllocations(0, pool, {a.data_ptr(), b.data_ptr()})
    assert not C._npu_checkPoolLiveAllocations(0, pool, {a.data_ptr()})  # b is live and not listed
    assert not C._npu_checkPoolLiveAllocations(0, pool, {a.data_ptr(), b.data_ptr(), 12345})  # 12345 is not live
    del b
    assert C._npu_checkPoolLiveAllocations(0, pool, {a.data_ptr()})


def test_checkpoint_restores_the_pools_live_blocks(pool):
    a = torch.arange(256, dtype=torch.float32, device="npu")
    b = torch.ones(300, device="npu")
    state = C._npu_getCheckpointState(0, pool)
    assert state.num_segments >= 1
    c = torch.zeros(200, device="npu")  # after the checkpoint
    a_ptr, b_ptr, c_ptr = a.data_ptr(), b.data_ptr(), c.data_ptr()
    torch.npu.synchronize()
    # a stays live and owns its block again; b's block comes back as a raw allocation; c's (stale) is freed
    stale = [b.untyped_storage()._cdata, c.untyped_storage()._cdata]
    C._npu_setCheckpointPoolState(0, state, stale, [a.untyped_storage()._cdata])
    assert not C._has_Standard_Deleter(b.untyped_storage()._cdata)
    del b, c
    assert C._npu_checkPoolLiveAllocations(0, pool, {a_ptr, b_ptr})
    C._npu_npuCachingAllocator_raw_delete(b_ptr)
    assert C._npu_checkPoolLiveAllocations(0, pool, {a_ptr})
    assert C._has_Standard_Deleter(a.untyped_storage()._cdata)
    assert torch.equal(a.cpu(), torch.arange(256, dtype=torch.float32))  # the memory was never touched
    # c's block is free: the pool hands its address out again
    assert torch.empty(200, device="npu").data_ptr() in (b_ptr, c_ptr)
    del a
    assert C._npu_checkPoolLiveAllocations(0, pool, set())


def _current_stats():
    torch.npu.synchronize()
    torch.npu.empty_cache()
    return {k: v for k, v in torch.npu.memory_stats().items() if k.endswith(".current")}


def test_a_restored_checkpoint_keeps_the_statistics():
    before = _current_stats()
    handle = torch.npu.graph_pool_handle()
    C._npu_beginAllocateCurrentThreadToPool(0, handle)
    a = torch.arange(256, dtype=torch.float32, device="npu")
    small, large = torch.ones(300, device="npu"), torch.ones(3 << 20, device="npu")  # small and large pool blocks
    state = C._npu_getCheckpointState(0, handle)
    later = [torch.zeros(200, device="npu"), torch.zeros(2 << 20, device="npu")]
    torch.npu.synchronize()
    stale = [t.untyped_storage()._cdata for t in (small, large, *later)]
    C._npu_setCheckpointPoolState(0, state, stale, [a.untyped_storage()._cdata])
    raw = [small.data_ptr(), large.data_ptr()]
    del small, large, later
    for ptr in raw:
        C._npu_npuCachingAllocator_raw_delete(ptr)
    assert C._npu_checkPoolLiveAllocations(0, handle, {a.data_ptr()})
    del a
    C._npu_endAllocateToPool(0, handle)
    C._npu_releasePool(0, handle)
    assert _current_stats() == before  # allocated, active, inactive split, reserved, segments: as before


def test_free_and_remove_deleter():
    t = torch.ones(64, device="npu")
    storage = t.untyped_storage()._cdata
    assert C._has_Standard_Deleter(storage)
    torch.npu.synchronize()
    before = torch.npu.memory_allocated()
    C._free_And_Remove_DeleterFn(storage)
    assert not C._has_Standard_Deleter(storage)
    assert torch.npu.memory_allocated() < before
    C._set_storage_data_ptr_access_error_msg(storage, "overwritten by a later replay")
    with pytest.raises(RuntimeError, match="overwritten by a later replay"):
        t.untyped_storage().data_ptr()


def test_tensors_data_ptrs_at_indices_equal():
    a, b = torch.ones(3, device="npu"), torch.ones(3, device="npu")
    assert C._tensors_data_ptrs_at_indices_equal([a, 7, b], [a.data_ptr(), None, b.data_ptr()], [0, 2])
    assert not C._tensors_data_ptrs_at_indices_equal([a, 7, b], [a.data_ptr(), None, a.data_ptr()], [0, 2])


@pytest.fixture
def trees():
    saved = (config.triton.slow_path_cudagraph_asserts, config.triton.fast_path_cudagraph_asserts)
    # every pool check on: after each warm-up, recording and checkpoint the pool's live blocks are the tree's outputs
    config.triton.slow_path_cudagraph_asserts = config.triton.fast_path_cudagraph_asserts = True
    yield
    config.triton.slow_path_cudagraph_asserts, config.triton.fast_path_cudagraph_asserts = saved
    _graph_tree.reset_npugraph_trees()


def _fn(body, n_out):
    def model(inputs):
        (x,) = inputs
        inputs.clear()
        return body(x)

    x = torch.zeros(8, device="npu")
    fn, _ = _graph_tree.npugraphify(model, [x], (), device_index=0, is_backward=False, is_inference=True,
                                    stack_traces=[None] * n_out)
    return fn


def test_tree_records_replays_and_checkpoints(trees):
    f = _fn(lambda x: [x * 2 + 1], 1)
    g = _fn(lambda y: [y.sin(), y.sum()], 2)
    h = _fn(lambda y: [y.cos() * 3], 1)
    states = []
    for step in range(7):
        torch.compiler.npugraph_mark_step_begin()
        xs = torch.randn(8)
        ref = xs * 2 + 1
        (a,) = f([xs.npu()])
        if step < 4:
            out, want = g([a]), [ref.sin(), ref.sum()]
        else:  # a new child of f's node: recorded from f's checkpointed allocator state
            out, want = h([a]), [ref.cos() * 3]
        torch.testing.assert_close(a.cpu(), ref)
        for o, w in zip(out, want):
            torch.testing.assert_close(o.cpu(), w)
        manager = _graph_tree.get_manager(0)
        states.append((manager.path_state, type(manager.current_node)))
        checkpoints = manager.debug_checkpointing_counter
    # npugraphify warmed each up (eagerly); g's path records, then replays; h's records after one checkpoint, then
    # replays
    recording = (_graph_tree.ExecutionState.RECORDING, _graph_tree.NPUGraphNode)
    replaying = (_graph_tree.ExecutionState.EXECUTION, _graph_tree.NPUGraphNode)
    assert states == [recording, replaying, replaying, replaying, recording, replaying, replaying]
    assert checkpoints == 1
    assert _graph_tree.MarkStepBox.mark_step_counter == -7
    (root,) = manager.get_roots()
    assert sorted(len(v) for v in root.children.values()) == [1, 1]  # g and h under f


def test_an_output_of_a_recording_a_later_step_frees_raises_when_read(trees):
    f = _fn(lambda x: [x + 1], 1)  # warmed up
    torch.compiler.npugraph_mark_step_begin()
    (kept,) = f([torch.ones(8, device="npu")])  # the recording's output
    torch.testing.assert_close(kept.cpu(), torch.full((8,), 2.0))
    torch.compiler.npugraph_mark_step_begin()
    f([torch.ones(8, device="npu")])  # a new step: the recording's outputs are freed, then it replays
    with pytest.raises(RuntimeError, match="accessing tensor output of NPUGraphs that has been overwritten"):
        kept.cpu()


def test_compiled_training_through_the_trees_matches_eager(trees):
    import copy

    torch._dynamo.reset()
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).npu()
    eager = copy.deepcopy(module)
    opt_c = torch.optim.SGD(module.parameters(), lr=0.1)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    compiled = torch.compile(module, mode="reduce-overhead")  # softnpu/inductor/npu_graphs.py: the trees
    for _ in range(4):  # warm-up, recording of forward and backward, replays
        x = torch.randn(8, 16, device="npu")
        losses = []
        for model, opt in ((compiled, opt_c), (eager, opt_e)):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach().cpu())
        torch.testing.assert_close(*losses)
    manager = _graph_tree.get_manager(0)
    assert manager.path_state == _graph_tree.ExecutionState.EXECUTION
    (forward,) = manager.get_roots()  # the backward recorded as the forward's child, both replayed
    assert [type(n) for nodes in forward.children.values() for n in nodes] == [_graph_tree.NPUGraphNode]
    assert forward.graph._replay_count() == 3
    for p, q in zip(module.parameters(), eager.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu())
    torch._dynamo.reset()


@pytest.fixture
def expandable_segments():
    torch.npu.memory._set_allocator_settings("expandable_segments:True")
    yield
    torch.npu.memory._set_allocator_settings("expandable_segments:False")


def test_tree_pools_keep_whole_segments_under_expandable_segments(expandable_segments, trees):
    # An expandable segment unmaps free pages as it grows, which a checkpoint cannot restore block by block: the
    # trees' pools keep whole segments, and a new branch after a replay is recorded from a checkpoint as without.
    f = _fn(lambda x: [x * 2 + 1], 1)
    g = _fn(lambda y: [y.sin()], 1)
    h = _fn(lambda y: [y.cos() * 3], 1)
    for step in range(5):
        torch.compiler.npugraph_mark_step_begin()
        xs = torch.randn(8)
        (a,) = f([xs.npu()])
        (out,), want = (g([a]), (xs * 2 + 1).sin()) if step < 3 else (h([a]), (xs * 2 + 1).cos() * 3)
        torch.testing.assert_close(out.cpu(), want)
    manager = _graph_tree.get_manager(0)
    assert manager.debug_checkpointing_counter == 1
    pool = manager.npu_graphs_thread_pool
    segments = [s for s in torch.npu.memory_snapshot() if s["segment_pool_id"] == pool]
    assert segments and not any(s["is_expandable"] for s in segments)


def test_inductors_runtime_finds_the_npu_trees_manager(trees):
    # output_code.maybe_handle_backward_generation asks torch._inductor.cudagraph_trees.get_manager(device index) for
    # the forward's manager when the backward is left ungraphed: without CUDA, that is npu's.
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: (x * 2).sin(), mode="reduce-overhead")
    for _ in range(3):
        compiled(torch.randn(8, device="npu"))
    assert torch._inductor.cudagraph_trees.get_manager(0, create_if_none_exists=False) is _graph_tree.get_manager(0)
    torch._dynamo.reset()
