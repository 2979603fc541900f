"""torch.distributed on npu: the hccl backend (softnpu's collectives over Gloo), DistributedDataParallel and FSDP.

Two worker processes (rank r on npu:r) run every scenario below in turn, once, each in a process group of its own
(a fresh FileStore), so a failure or a hang in one scenario leaves the others unaffected: a hung collective fails
after the group's timeout and the workers meet again at the next group. Each worker records every scenario's
outcome as it goes; the tests read them.
"""

import copy
import datetime
import json
import subprocess
import time
import traceback

import pytest
import torch
import torch.distributed as dist
from conftest import start_python

WORLD_SIZE = 2
GROUP_TIMEOUT = datetime.timedelta(seconds=10)  # a hung collective fails after this
WORKERS_TIMEOUT = 120  # seconds for all scenarios (about 25 when nothing hangs)

# name -> (backend passed to init_process_group, function(rank, device))
SCENARIOS = {}


def scenario(backend="hccl"):
    def register(fn):
        SCENARIOS[fn.__name__] = (backend, fn)
        return fn

    return register


def _worker(rank: int, workdir: str) -> None:
    """A rank's run: every scenario in its own process group; outcomes in workdir/rank<r>.json as they come."""
    torch.npu.set_device(rank)
    device = torch.device("npu", rank)
    outcomes = {}
    for name, (backend, fn) in SCENARIOS.items():
        kwargs = {} if backend is None else {"backend": backend}
        try:
            dist.init_process_group(init_method=f"file://{workdir}/{name}.store", rank=rank, world_size=WORLD_SIZE,
                                    timeout=GROUP_TIMEOUT, **kwargs)
            try:
                fn(rank, device)
                # Neither rank tears the group down while the other still uses it (or is still connecting to it).
                dist.barrier()
                torch.npu.synchronize()
            finally:
                dist.destroy_process_group()
            outcomes[name] = "ok"
        except Exception:
            outcomes[name] = traceback.format_exc()
        with open(f"{workdir}/rank{rank}.json", "w") as f:
            json.dump(outcomes, f)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Per rank: {scenario: "ok" or its traceback}, and the worker's stderr (for scenarios it never reached)."""
    workdir = tmp_path_factory.mktemp("distributed")
    workers = [start_python(f"import test_distributed; test_distributed._worker({rank}, {str(workdir)!r})")
               for rank in range(WORLD_SIZE)]
    deadline = time.monotonic() + WORKERS_TIMEOUT
    stderr = []
    for worker in workers:
        try:
            _, err = worker.proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for w in workers:
                w.proc.kill()
            _, err = worker.proc.communicate()
            err += f"\n(killed after {WORKERS_TIMEOUT} s)"
        stderr.append(err)
    results = []
    for rank in range(WORLD_SIZE):
        path = workdir / f"rank{rank}.json"
        results.append((json.loads(path.read_text()) if path.exists() else {}, stderr[rank]))
    return results


def full(value, device, n=4, dtype=torch.float32):
    return torch.full((n,), value, dtype=dtype, device=device)


def assert_equal(actual, expected):
    torch.testing.assert_close(actual.cpu(), torch.as_tensor(expected, dtype=actual.dtype))


# ---------------------------------------------------------------- backend selection


@scenario(backend="hccl")
def hccl_by_name(rank, device):
    assert dist.get_backend() == "hccl"
    assert type(dist.group.WORLD._get_backend(device)).__name__ == "ProcessGroupHCCL"
    t = full(rank + 1.0, device)
    dist.all_reduce(t)
    assert_equal(t, [3.0] * 4)


@scenario(backend="cpu:gloo,npu:hccl")
def per_device_backends(rank, device):
    world = dist.group.WORLD
    assert type(world._get_backend(device)).__name__ == "ProcessGroupHCCL"
    assert type(world._get_backend(torch.device("cpu"))).__name__ == "ProcessGroupGloo"
    on_npu, on_cpu = full(rank + 1.0, device), full(rank + 1.0, "cpu")
    dist.all_reduce(on_npu)
    dist.all_reduce(on_cpu)
    assert_equal(on_npu, [3.0] * 4)
    assert_equal(on_cpu, [3.0] * 4)


@scenario(backend=None)
def default_backend_for_npu(rank, device):
    assert dist.Backend.default_device_backend_map["npu"] == "hccl"
    assert type(dist.group.WORLD._get_backend(device)).__name__ == "ProcessGroupHCCL"
    t = full(rank + 1.0, device)
    dist.all_reduce(t)
    assert_equal(t, [3.0] * 4)


@scenario()
def torch_npu_spelling(rank, device):
    import torch_npu

    assert dist.is_hccl_available()
    assert isinstance(dist.group.WORLD._get_backend(device), torch_npu.distributed.ProcessGroupHCCL)


# ---------------------------------------------------------------- collectives


@scenario()
def all_reduce_ops(rank, device):
    a, b = 6, 3  # rank 0's and rank 1's values
    mine = a if rank == 0 else b
    floats = {
        dist.ReduceOp.SUM: a + b,
        dist.ReduceOp.PRODUCT: a * b,
        dist.ReduceOp.MIN: min(a, b),
        dist.ReduceOp.MAX: max(a, b),
        dist.ReduceOp.AVG: (a + b) / 2,
    }
    for op, expected in floats.items():
        t = full(float(mine), device)
        dist.all_reduce(t, op=op)
        assert_equal(t, [expected] * 4)
    ints = {dist.ReduceOp.BAND: a & b, dist.ReduceOp.BOR: a | b, dist.ReduceOp.BXOR: a ^ b}
    for op, expected in ints.items():
        t = full(mine, device, dtype=torch.int32)
        dist.all_reduce(t, op=op)
        assert_equal(t, [expected] * 4)


@scenario()
def unsupported_reduce_op_is_named(rank, device):
    with pytest.raises(RuntimeError, match="PREMUL_SUM"):
        dist.all_reduce(full(1.0, device), op=dist._make_nccl_premul_sum(2.0))


@scenario()
def non_contiguous_tensors(rank, device):
    base = torch.zeros(4, 6, device=device)
    view = base.t()[::2]  # 3 x 4, strided: every other column of base
    view.fill_(rank + 1.0)
    dist.all_reduce(view)
    expected = torch.zeros(4, 6)
    expected.t()[::2] = 3.0
    assert_equal(base, expected)


@scenario()
def broadcast_and_reduce(rank, device):
    t = full(10.0 * (rank + 1), device)
    dist.broadcast(t, src=1)
    assert_equal(t, [20.0] * 4)
    t = full(rank + 1.0, device)
    dist.reduce(t, dst=0)
    assert_equal(t, [3.0] * 4 if rank == 0 else [2.0] * 4)  # only the root's tensor receives the result


@scenario()
def all_gather_variants(rank, device):
    outs = [torch.empty(3, device=device) for _ in range(WORLD_SIZE)]
    dist.all_gather(outs, full(rank + 1.0, device, n=3))
    assert_equal(torch.stack(outs), [[1.0] * 3, [2.0] * 3])
    out = torch.empty(2 * 3, device=device)
    dist.all_gather_into_tensor(out, full(rank + 1.0, device, n=3))
    assert_equal(out, [1.0] * 3 + [2.0] * 3)


@scenario()
def integer_types_gloo_lacks(rank, device):
    # int16, uint16, uint32, uint64: moved bit for bit; summed where two's complement allows; refused, named, where not.
    big = {torch.uint32: 2**32 - 2, torch.uint64: 2**63 + 5, torch.uint16: 65530, torch.int16: -30000}
    for dtype, value in big.items():
        outs = [torch.empty(3, dtype=dtype, device=device) for _ in range(WORLD_SIZE)]
        dist.all_gather(outs, full(value - rank, device, n=3, dtype=dtype))
        assert [o.cpu().tolist() for o in outs] == [[value] * 3, [value - 1] * 3], (dtype, outs)
        x = full(value if rank == 0 else 0, device, n=2, dtype=dtype)
        dist.broadcast(x, src=0)
        assert x.cpu().tolist() == [value] * 2
    for dtype in (torch.uint32, torch.uint64):
        x = full(2**31 + rank, device, n=2, dtype=dtype)
        dist.all_reduce(x)
        assert x.cpu().tolist() == [(2 * 2**31 + 1) % (2**32 if dtype == torch.uint32 else 2**64)] * 2
        try:
            dist.all_reduce(full(1, device, dtype=dtype), op=dist.ReduceOp.MAX)
            raise AssertionError("MAX of an unsigned type was accepted")
        except RuntimeError as e:
            assert "hccl:all_reduce: MIN and MAX of UInt" in str(e), e
    try:
        dist.all_reduce(full(1, device, dtype=torch.int16))
        raise AssertionError("a sum of int16 was accepted")
    except RuntimeError as e:
        assert "hccl:all_reduce: reducing Short is not supported" in str(e), e


@scenario()
def reduce_scatter_variants(rank, device):
    ins = [full(10.0 * (rank + 1) + i, device, n=2) for i in range(WORLD_SIZE)]  # chunk i goes to rank i
    out = torch.empty(2, device=device)
    dist.reduce_scatter(out, ins)
    assert_equal(out, [30.0 + 2 * rank] * 2)
    out = torch.empty(2, device=device)
    dist.reduce_scatter_tensor(out, torch.cat(ins))
    assert_equal(out, [30.0 + 2 * rank] * 2)


@scenario()
def all_to_all_variants(rank, device):
    ins = [full(10.0 * rank + i, device, n=2) for i in range(WORLD_SIZE)]
    outs = [torch.empty(2, device=device) for _ in range(WORLD_SIZE)]
    dist.all_to_all(outs, ins)
    assert_equal(torch.stack(outs), [[rank] * 2, [10.0 + rank] * 2])
    # Uneven splits: rank 0 sends 1 element to rank 0 and 2 to rank 1; rank 1 sends 3 to rank 0 and 1 to rank 1.
    in_splits = [[1, 2], [3, 1]][rank]
    out_splits = [[1, 3], [2, 1]][rank]
    inp = torch.arange(sum(in_splits), dtype=torch.float32, device=device) + 100 * rank
    out = torch.empty(sum(out_splits), device=device)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    assert_equal(out, [[0.0, 100.0, 101.0, 102.0], [1.0, 2.0, 103.0]][rank])


@scenario()
def gather_and_scatter(rank, device):
    gathered = [torch.empty(2, device=device) for _ in range(WORLD_SIZE)] if rank == 1 else None
    dist.gather(full(rank + 1.0, device, n=2), gathered, dst=1)
    if rank == 1:
        assert_equal(torch.stack(gathered), [[1.0] * 2, [2.0] * 2])
    out = torch.empty(2, device=device)
    dist.scatter(out, [full(5.0, device, n=2), full(6.0, device, n=2)] if rank == 0 else None, src=0)
    assert_equal(out, [5.0 + rank] * 2)


@scenario()
def point_to_point(rank, device):
    peer = 1 - rank
    if rank == 0:
        dist.send(full(7.0, device), dst=peer)
    else:
        t = torch.empty(4, device=device)
        dist.recv(t, src=peer)
        assert_equal(t, [7.0] * 4)
    # Both ranks post a receive before their send: each completes only once the peer's send arrives.
    got = torch.empty(4, device=device)
    recv = dist.irecv(got, src=peer)
    send = dist.isend(full(rank + 1.0, device), dst=peer)
    send.wait()
    recv.wait()
    assert_equal(got, [peer + 1.0] * 4)
    # A receive from any source reports its sender.
    if rank == 0:
        t = torch.empty(4, device=device)
        assert dist.recv(t) == 1
        assert_equal(t, [8.0] * 4)
    else:
        dist.send(full(8.0, device), dst=0)


@scenario()
def barrier_orders_ranks(rank, device):
    if rank == 1:
        time.sleep(0.3)
    entered = time.time()
    dist.barrier()
    left = time.time()
    stamps = [torch.empty(2, dtype=torch.float64, device=device) for _ in range(WORLD_SIZE)]
    dist.all_gather(stamps, torch.tensor([entered, left], dtype=torch.float64, device=device))
    (entered_0, left_0), (entered_1, left_1) = (stamp.tolist() for stamp in stamps)
    # No rank left the barrier before every rank had reached it (both ranks read the same clock).
    assert min(left_0, left_1) >= max(entered_0, entered_1)


# ---------------------------------------------------------------- the same calls as Gloo on the CPU
#
# Each call runs twice in one "cpu:gloo,npu:hccl" group: on npu tensors (hccl) and on the same values on the CPU
# (gloo); the npu results must be Gloo's. Where HCCL and NCCL accept shapes Gloo does not (the "into tensor"
# collectives take any shapes whose element counts match), the CPU call uses the shapes Gloo takes.


def rank_values(rank, *shape, seed=0):
    """Different values on each rank, the same on every run."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(shape, generator=g)


def assert_same(actual, expected):
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


@scenario(backend="cpu:gloo,npu:hccl")
def all_gather_into_tensor_takes_any_shapes(rank, device):
    for in_shape in [(5,), (1, 5), (2, 3), (3, 1, 2), ()]:
        x = rank_values(rank, *in_shape)
        n = x.numel()
        expected = torch.empty(WORLD_SIZE * n)
        dist.all_gather_into_tensor(expected, x.reshape(-1))  # flat, which Gloo takes
        for out_shape in [(WORLD_SIZE * n,), (WORLD_SIZE, *in_shape), (WORLD_SIZE * n, 1), (1, WORLD_SIZE * n)]:
            out = torch.full(out_shape, -1.0, device=device)
            dist.all_gather_into_tensor(out, x.to(device))
            assert out.shape == out_shape
            assert_same(out.reshape(-1), expected)
    # accelerate.gather's pattern: a flat buffer for a 2-D input, viewed back as rows.
    x = rank_values(rank, 3, 4)
    out = torch.empty(WORLD_SIZE * x.numel(), device=device)
    dist.all_gather_into_tensor(out, x.to(device))
    expected = torch.empty(WORLD_SIZE * 3, 4)
    dist.all_gather_into_tensor(expected, x)
    assert_same(out.view(-1, 4), expected)


@scenario(backend="cpu:gloo,npu:hccl")
def reduce_scatter_tensor_takes_any_shapes(rank, device):
    for out_shape in [(5,), (1, 5), (2, 3)]:
        n = torch.Size(out_shape).numel()
        x = rank_values(rank, WORLD_SIZE * n)
        expected = torch.empty(n)
        dist.reduce_scatter_tensor(expected, x)
        for in_shape in [(WORLD_SIZE * n,), (WORLD_SIZE, *out_shape), (WORLD_SIZE * out_shape[0], *out_shape[1:]),
                         (1, WORLD_SIZE * n)]:
            out = torch.full(out_shape, -1.0, device=device)
            dist.reduce_scatter_tensor(out, x.view(in_shape).to(device))
            assert out.shape == out_shape
            assert_same(out.reshape(-1), expected)
    x = rank_values(rank, WORLD_SIZE * 4)
    for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.AVG]:
        expected = torch.empty(4)
        dist.reduce_scatter_tensor(expected, x, op=op)
        out = torch.empty(2, 2, device=device)
        dist.reduce_scatter_tensor(out, x.view(WORLD_SIZE, 2, 2).to(device), op=op)
        torch.testing.assert_close(out.reshape(-1).cpu(), expected)


@scenario(backend="cpu:gloo,npu:hccl")
def into_tensor_sizes_must_match(rank, device):
    with pytest.raises(ValueError, match="world_size times input tensor size"):
        dist.all_gather_into_tensor(torch.empty(7, device=device), torch.empty(4, device=device))
    with pytest.raises(ValueError, match="world_size times output tensor size"):
        dist.reduce_scatter_tensor(torch.empty(4, device=device), torch.empty(2, 3, device=device))
    with pytest.raises(TypeError, match="same type"):
        dist.all_gather_into_tensor(torch.empty(8, device=device, dtype=torch.float64), torch.empty(4, device=device))


@scenario(backend="cpu:gloo,npu:hccl")
def list_collectives_match_gloo(rank, device):
    x = rank_values(rank, 2, 3)
    expected = [torch.empty(2, 3) for _ in range(WORLD_SIZE)]
    dist.all_gather(expected, x)
    outs = [torch.empty(2, 3, device=device) for _ in range(WORLD_SIZE)]
    dist.all_gather(outs, x.to(device))
    for out, exp in zip(outs, expected):
        assert_same(out, exp)

    ins = [rank_values(rank, 3, 2, seed=i) for i in range(WORLD_SIZE)]
    expected = torch.empty(3, 2)
    dist.reduce_scatter(expected, ins)
    out = torch.empty(3, 2, device=device)
    dist.reduce_scatter(out, [t.to(device) for t in ins])
    assert_same(out, expected)

    for dst in range(WORLD_SIZE):
        expected = [torch.empty(2, 3) for _ in range(WORLD_SIZE)] if rank == dst else None
        dist.gather(x, expected, dst=dst)
        outs = [torch.empty(2, 3, device=device) for _ in range(WORLD_SIZE)] if rank == dst else None
        dist.gather(x.to(device), outs, dst=dst)
        if rank == dst:
            for out, exp in zip(outs, expected):
                assert_same(out, exp)

    for src in range(WORLD_SIZE):
        chunks = [rank_values(rank, 4, seed=i) for i in range(WORLD_SIZE)] if rank == src else None
        expected = torch.empty(4)
        dist.scatter(expected, chunks, src=src)
        out = torch.empty(4, device=device)
        dist.scatter(out, [t.to(device) for t in chunks] if rank == src else None, src=src)
        assert_same(out, expected)


@scenario(backend="cpu:gloo,npu:hccl")
def all_to_all_single_matches_gloo(rank, device):
    # Uneven splits of dim 0 of a 2-D tensor, and the even split of no split sizes.
    in_splits = [[1, 2], [3, 0]][rank]
    out_splits = [[1, 3], [2, 0]][rank]
    x = rank_values(rank, sum(in_splits), 3)
    expected = torch.empty(sum(out_splits), 3)
    dist.all_to_all_single(expected, x, out_splits, in_splits)
    out = torch.full((sum(out_splits), 3), -1.0, device=device)
    dist.all_to_all_single(out, x.to(device), out_splits, in_splits)
    assert_same(out, expected)
    x = rank_values(rank, 4, 2)
    expected = torch.empty(4, 2)
    dist.all_to_all_single(expected, x)
    out = torch.empty(4, 2, device=device)
    dist.all_to_all_single(out, x.to(device))
    assert_same(out, expected)


@scenario()
def monitored_barrier_in_an_hccl_group(rank, device):
    if rank == 1:
        time.sleep(0.3)
    entered = time.time()
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=5))
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=5), wait_all_ranks=True)
    left = time.time()
    stamps = [torch.empty(2, dtype=torch.float64, device=device) for _ in range(WORLD_SIZE)]
    dist.all_gather(stamps, torch.tensor([entered, left], dtype=torch.float64, device=device))
    (entered_0, left_0), (entered_1, left_1) = (stamp.tolist() for stamp in stamps)
    assert min(left_0, left_1) >= max(entered_0, entered_1)


@scenario(backend="cpu:gloo,npu:hccl")
def barriers_in_a_mixed_group(rank, device):
    dist.barrier()
    dist.barrier(device_ids=[rank])
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=5))


@scenario()
def object_collectives(rank, device):
    # Objects travel as npu tensors, on the group's only device type.
    gathered = [None] * WORLD_SIZE
    dist.all_gather_object(gathered, {"rank": rank})
    assert gathered == [{"rank": 0}, {"rank": 1}]
    objects = [f"from {rank}"]
    dist.broadcast_object_list(objects, src=1)
    assert objects == ["from 1"]


@scenario()
def tensors_must_be_npu(rank, device):
    with pytest.raises(RuntimeError, match="hccl:all_gather: expected npu tensors, got a tensor on cpu"):
        dist.all_gather([torch.empty(4), torch.empty(4)], full(1.0, device))


# ---------------------------------------------------------------- asynchrony and streams


@scenario()
def inputs_are_taken_in_stream_order(rank, device):
    # The value all_reduce sends is the one the stream computes before it, however long the stream takes.
    t = torch.zeros(4, device=device)
    torch.npu._sleep(300_000_000)
    t.fill_(rank + 1.0)
    dist.all_reduce(t)
    assert_equal(t, [3.0] * 4)


@scenario()
def outputs_are_written_in_stream_order(rank, device):
    # A receiving rank's result lands after what its stream was asked to do before the call, even though the host
    # need not wait for that stream (broadcast and recv have no input to take from it).
    t = torch.empty(4, device=device)
    torch.npu._sleep(300_000_000)
    t.fill_(-1.0)
    dist.broadcast(t if rank == 1 else full(5.0, device), src=0)
    if rank == 1:
        assert_equal(t, [5.0] * 4)
    t = torch.empty(4, device=device)
    torch.npu._sleep(300_000_000)
    t.fill_(-1.0)
    if rank == 0:
        dist.send(full(6.0, device), dst=1)
    else:
        dist.recv(t, src=0)
        assert_equal(t, [6.0] * 4)


@scenario()
def async_work_returns_before_peers_arrive(rank, device):
    t = full(rank + 1.0, device)
    if rank == 1:
        time.sleep(1.0)
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    if rank == 0:
        assert time.monotonic() - start < 0.5, "async all_reduce waited for the peer"
        assert not work.is_completed()
    work.wait()
    assert work.is_completed() and work.is_success()
    assert_equal(t, [3.0] * 4)


@scenario()
def wait_orders_the_current_stream(rank, device):
    # Large enough that copying the result back takes a while: the current stream must still see all of it.
    n = 1 << 22
    t = torch.full((n,), rank + 1.0, device=device)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    total = t.sum()  # queued right behind wait(), no host synchronization
    assert total.item() == 3.0 * n
    # The same from a side stream current at wait() time.
    t = torch.full((n,), rank + 1.0, device=device)
    work = dist.all_reduce(t, async_op=True)
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        work.wait()
        total = t.sum()
    side.synchronize()
    assert total.item() == 3.0 * n


@scenario()
def collectives_on_a_side_stream(rank, device):
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        torch.npu._sleep(200_000_000)
        t = torch.full((4,), rank + 1.0, device=device)
        dist.all_reduce(t)
        doubled = t * 2
    side.synchronize()
    assert_equal(doubled, [6.0] * 4)


@scenario()
def futures(rank, device):
    t = full(rank + 1.0, device)
    fut = dist.all_reduce(t, async_op=True).get_future()
    result = fut.then(lambda f: f.value()[0] * 10).wait()
    assert_equal(result, [30.0] * 4)
    assert_equal(fut.value()[0], [3.0] * 4)


@scenario()
def leaves_that_require_grad(rank, device):
    weight = torch.nn.Parameter(full(rank + 1.0, device))
    dist.broadcast(weight, src=0)
    assert_equal(weight.detach(), [1.0] * 4)


# ---------------------------------------------------------------- DistributedDataParallel


@scenario()
def ddp_matches_single_process_training(rank, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    reference = copy.deepcopy(model).to(device)  # trained on the whole batch, in this process alone
    ddp = DDP(copy.deepcopy(model).to(device), device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = torch.randn(8, 8, device=device), torch.randn(8, 3, device=device)  # the same on both ranks (seeded)
    shard = slice(4 * rank, 4 * (rank + 1))
    loss_fn = torch.nn.MSELoss()
    for _ in range(3):
        loss = loss_fn(ddp(x[shard]), y[shard])
        loss.backward()
        ref_loss = loss_fn(reference(x), y)
        ref_loss.backward()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)
        torch.testing.assert_close(mean_loss.cpu(), ref_loss.detach().cpu())
        for p, ref_p in zip(ddp.parameters(), reference.parameters()):
            grads = [torch.empty_like(p.grad) for _ in range(WORLD_SIZE)]
            dist.all_gather(grads, p.grad)
            torch.testing.assert_close(grads[0].cpu(), grads[1].cpu(), rtol=0, atol=0)
            torch.testing.assert_close(p.grad.cpu(), ref_p.grad.cpu())
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for p, ref_p in zip(ddp.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach().cpu(), ref_p.detach().cpu())


# ---------------------------------------------------------------- FullyShardedDataParallel


def _train_sharded(rank, device, wrap, steps=4):
    """Trains a small model wrapped by `wrap` on this rank's half of a batch; returns the full parameters (every
    rank's the same) and the same training on the CPU without FSDP, on the whole batch (FSDP averages gradients
    over the ranks, so with equal halves that is the mean loss of the whole batch)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 3))
    reference = copy.deepcopy(model)
    sharded = wrap(copy.deepcopy(model).to(device))
    opt = torch.optim.SGD(sharded.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(steps, 8, 8), torch.randn(steps, 8, 3)  # the same on both ranks (seeded)
    half = slice(4 * rank, 4 * (rank + 1))
    loss_fn = torch.nn.MSELoss()
    for step in range(steps):
        loss_fn(sharded(x[step, half].to(device)), y[step, half].to(device)).backward()
        opt.step()
        opt.zero_grad()
        loss_fn(reference(x[step]), y[step]).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    return sharded, reference


def _assert_full_params_match(params, reference):
    for p, ref_p in zip(params, reference.parameters()):
        p = p.detach()
        gathered = [torch.empty_like(p) for _ in range(WORLD_SIZE)]
        dist.all_gather(gathered, p)
        torch.testing.assert_close(gathered[0].cpu(), gathered[1].cpu(), rtol=0, atol=0)
        torch.testing.assert_close(p.cpu(), ref_p.detach(), rtol=1e-5, atol=1e-6)


@scenario()
def fsdp_matches_training_on_the_cpu(rank, device):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    sharded, reference = _train_sharded(rank, device, lambda m: FSDP(m, device_id=device, use_orig_params=True))
    assert all(p.device == device for p in sharded.parameters())
    with FSDP.summon_full_params(sharded):
        _assert_full_params_match(list(sharded.parameters()), reference)


@scenario()
def fsdp_with_nested_units_matches_training_on_the_cpu(rank, device):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    policy = ModuleWrapPolicy({torch.nn.Linear})
    sharded, reference = _train_sharded(rank, device, lambda m: FSDP(m, device_id=device, auto_wrap_policy=policy))
    with FSDP.summon_full_params(sharded):
        _assert_full_params_match(list(sharded.parameters()), reference)


@scenario()
def fsdp2_matches_training_on_the_cpu(rank, device):
    from torch.distributed.fsdp import fully_shard

    def wrap(model):
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        return fully_shard(model)

    sharded, reference = _train_sharded(rank, device, wrap)
    _assert_full_params_match([p.full_tensor() for p in sharded.parameters()], reference)


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(outcomes, name):
    failures = []
    for rank, (ranks_outcomes, stderr) in enumerate(outcomes):
        outcome = ranks_outcomes.get(name, f"not run: the worker ended before it. Its stderr:\n{stderr[-3000:]}")
        if outcome != "ok":
            failures.append(f"--- rank {rank}:\n{outcome}")
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
