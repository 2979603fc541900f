"""Private formats as metadata (issue 34 item 6, csrc/backend/format.cpp): a tensor cast to NC1HWC0, FRACTAL_Z,
FRACTAL_NZ, ... keeps its logical shape and values, get_npu_format returns the format, get_storage_size the element
count torch_npu's FormatHelper gives its padded storage shape; ops, copies and torch.save read it as ND;
torch.npu.config.allow_internal_format=False makes casts give the base format, as torch_npu does."""

import copy
import io

import pytest
import torch
import torch_npu
from torch_npu import get_npu_format, npu_format_cast


@pytest.fixture
def internal_formats():
    """Private formats allowed (torch_npu's own format tests set it so too), restored afterwards."""
    before = torch.npu.config.allow_internal_format
    torch.npu.config.allow_internal_format = True
    yield
    torch.npu.config.allow_internal_format = before


# (format, logical shape, dtype, torch_npu's storage shape). The storage shapes follow torch_npu's FormatHelper:
# NC1HWC0 (N, ceil(C/16), H, W, 16) of the shape as NCHW (fewer dims fill C, H, W); FRACTAL_Z
# (ceil(C/16)*H*W, ceil(N/16), 16, 16); FRACTAL_NZ (..., ceil(cols/C0), ceil(rows/16), 16, C0) with C0 = 32 bytes
# of at most 2-byte items (16 for float16 and float32, 32 for int8), a vector as one column; NDC1HWC0
# (N, D, ceil(C/16), H, W, 16) and FRACTAL_Z_3D (D*ceil(C/16)*H*W, ceil(N/16), 16, 16) of NCDHW shapes; the C0_x
# variants with C0 = x (aclnn's own example: (64, 128) in FRACTAL_NZ_C0_4 is (32, 4, 16, 4)).
CASES = [
    (29, (32, 48), torch.float16, (3, 2, 16, 16)),
    (29, (33, 17), torch.float32, (2, 3, 16, 16)),
    (29, (33, 17), torch.int8, (1, 3, 16, 32)),
    (29, (2, 5, 20, 7), torch.bfloat16, (2, 5, 1, 2, 16, 16)),
    (29, (5,), torch.float16, (1, 1, 16, 16)),
    (3, (2, 3, 4, 5), torch.float16, (2, 1, 4, 5, 16)),
    (3, (3, 4, 5), torch.float32, (1, 1, 4, 5, 16)),
    (4, (32, 17, 3, 3), torch.float16, (18, 2, 16, 16)),
    (12, (2, 3, 4, 5), torch.float16, (2, 1, 4, 5, 4)),
    (32, (1, 20, 2, 3, 3), torch.float16, (1, 2, 2, 3, 3, 16)),
    (33, (20, 17, 2, 3, 3), torch.float16, (36, 2, 16, 16)),
    (53, (64, 128), torch.float32, (32, 4, 16, 4)),
]


@pytest.mark.parametrize("fmt,shape,dtype,storage", CASES, ids=lambda v: str(v))
def test_private_format_keeps_shape_and_values_and_reports_storage_size(internal_formats, fmt, shape, dtype,
                                                                         storage):
    x = (torch.randn(shape) * 10).to(dtype)
    xn = x.npu()
    cast = npu_format_cast(xn, fmt)
    assert get_npu_format(cast) == fmt and get_npu_format(xn) == 2  # a copy; the input keeps ND
    assert cast.shape == x.shape and cast.dtype == dtype and cast.is_contiguous()
    assert torch.equal(cast.cpu(), x)
    assert torch_npu.get_storage_size(cast) == torch.Size(storage).numel()
    assert torch_npu.get_storage_size(xn) == x.numel()
    # In place, and taking another tensor's format (torch_npu's Tensor overloads).
    y = x.npu()
    assert torch_npu.npu_format_cast_(y, fmt) is y and get_npu_format(y) == fmt
    assert torch.equal(y.cpu(), x)
    assert get_npu_format(npu_format_cast(xn, cast)) == fmt
    z = x.npu()
    assert get_npu_format(torch_npu.npu_format_cast_(z, cast)) == fmt
    e = torch_npu.empty_with_format(shape, dtype=dtype, device="npu", acl_format=fmt)
    assert e.shape == x.shape and get_npu_format(e) == fmt
    assert torch_npu.get_storage_size(e) == torch.Size(storage).numel()


def test_shapes_a_format_cannot_hold_are_refused(internal_formats):
    with pytest.raises(RuntimeError, match="a tensor of 4 dimensions cannot be NDC1HWC0"):
        npu_format_cast(torch.ones(2, 3, 4, 5, device="npu"), 32)
    with pytest.raises(RuntimeError, match="a tensor of 5 dimensions cannot be NC1HWC0"):
        npu_format_cast(torch.ones(1, 2, 3, 4, 5, device="npu"), 3)
    x = torch.ones(2, 3, 4, 5, device="npu")
    with pytest.raises(RuntimeError, match="cannot be FRACTAL_Z_3D"):
        x.npu_format_cast_(33)
    assert get_npu_format(x) == 2  # left as it was
    with pytest.raises(RuntimeError, match="unknown acl_format 7"):
        npu_format_cast(x, 7)


def test_what_ops_return(internal_formats):
    # torch_npu's ops return ND tensors; those that write into a given tensor (in-place ops, out=, copy_) leave it
    # in its format. Shallow copies (detach, nn.Parameter) keep it; views are ND here.
    w = torch.randn(32, 16)
    wn = npu_format_cast(w.npu(), 29)
    assert get_npu_format(wn + 1) == 2
    assert get_npu_format(wn @ torch.randn(16, 8, device="npu")) == 2
    assert get_npu_format(wn.t()) == 2 and get_npu_format(wn[1:]) == 2
    assert get_npu_format(wn.detach()) == 29 and get_npu_format(torch.nn.Parameter(wn)) == 29
    wn.add_(1)
    wn.mul_(2)
    assert get_npu_format(wn) == 29 and torch.equal(wn.cpu(), (w + 1) * 2)
    wn.copy_(w)
    torch.add(w.npu(), 3, out=wn)
    assert get_npu_format(wn) == 29 and torch.equal(wn.cpu(), w + 3)
    assert torch.equal(wn.to("npu:1").cpu(), w + 3)  # copies read ND data


def test_a_training_step_in_fractal_nz_equals_nd(internal_formats):
    # As vllm-ascend and MindSpeed do: a Linear's weight cast to FRACTAL_NZ in place of its data.
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, target = torch.randn(8, 16), torch.randn(8, 4)
    nd, nz = copy.deepcopy(reference).npu(), copy.deepcopy(reference).npu()
    for m in nz:
        if isinstance(m, torch.nn.Linear):
            m.weight.data = npu_format_cast(m.weight.data, 29)
    assert [get_npu_format(m.weight) for m in nz if isinstance(m, torch.nn.Linear)] == [29, 29]
    results = []
    for model in (nd, nz):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        losses = []
        for _ in range(2):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.npu()), target.npu())
            loss.backward()
            opt.step()
            losses.append(loss.item())
        results.append((losses, [p.grad.cpu() for p in model.parameters()],
                        [p.detach().cpu() for p in model.parameters()]))
    (nd_losses, nd_grads, nd_params), (nz_losses, nz_grads, nz_params) = results
    assert nd_losses == nz_losses
    assert all(torch.equal(a, b) for a, b in zip(nd_grads, nz_grads))
    assert all(torch.equal(a, b) for a, b in zip(nd_params, nz_params))
    # The optimizer updated the weights in place: still FRACTAL_NZ, as on Ascend.
    assert [get_npu_format(m.weight) for m in nz if isinstance(m, torch.nn.Linear)] == [29, 29]
    # And the CPU agrees (same initialization, the same step).
    cpu = reference
    opt = torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9)
    for step in range(2):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(cpu(x), target)
        loss.backward()
        opt.step()
        assert abs(loss.item() - nz_losses[step]) < 1e-5


def test_deepcopy_keeps_the_format(internal_formats):
    x = npu_format_cast(torch.rand(3, 3).npu(), 29)
    memo = {}
    y = copy.deepcopy(x, memo)
    assert get_npu_format(y) == 29 and y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert torch.equal(y.cpu(), x.cpu())
    assert copy.deepcopy(x, memo) is y  # the memo answers a second copy, as for any tensor
    assert get_npu_format(copy.deepcopy(torch.rand(2, 2).npu())) == 2


def test_weak_ref_tensor_keeps_the_format(internal_formats):
    # torch_npu._C._weak_ref_tensor copies the storage's descriptor (the format) to the alias, as torch_npu's.
    x = npu_format_cast(torch.rand(4, 4).npu(), 29)
    weak = torch_npu._C._weak_ref_tensor(x)
    assert get_npu_format(weak) == 29 and weak.data_ptr() == x.data_ptr()
    assert torch.equal(weak.cpu(), x.cpu())
    assert get_npu_format(torch_npu._C._weak_ref_tensor(torch.rand(2, 2).npu())) == 2


def test_save_load_round_trip_keeps_the_format(internal_formats):
    w = torch.randn(20, 40, dtype=torch.float16)
    state = {"nz": npu_format_cast(w.npu(), 29), "fz": npu_format_cast(torch.randn(32, 3, 3, 3).npu(), 4),
             "nd": w.npu()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert {k: get_npu_format(v) for k, v in loaded.items()} == {"nz": 29, "fz": 4, "nd": 2}
    assert torch.equal(loaded["nz"].cpu(), w) and torch.equal(loaded["fz"].cpu(), state["fz"].cpu())
    assert torch_npu.get_storage_size(loaded["nz"]) == torch_npu.get_storage_size(state["nz"]) == 3 * 2 * 16 * 16
    # Loaded where private formats are not allowed: the base format, as torch_npu's load casts.
    torch.npu.config.allow_internal_format = False
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert {k: get_npu_format(v) for k, v in loaded.items()} == {"nz": 2, "fz": 0, "nd": 2}
    # Onto the CPU the data is ND.
    buffer.seek(0)
    assert torch.equal(torch.load(buffer, map_location="cpu")["nz"], w)


@pytest.mark.parametrize("fmt,base", [(29, 2), (3, 0), (4, 0), (12, 0), (32, 30), (33, 30), (50, 2)])
def test_without_internal_formats_casts_give_the_base_format(fmt, base):
    before = torch.npu.config.allow_internal_format
    torch.npu.config.allow_internal_format = False
    try:
        shape = (2, 20, 2, 3, 3) if fmt in (32, 33) else (2, 20, 3, 3)
        x = torch.randn(shape)
        cast = npu_format_cast(x.npu(), fmt)
        assert get_npu_format(cast) == base and torch.equal(cast.cpu(), x)
        assert torch_npu.get_storage_size(cast) == x.numel()
        assert get_npu_format(torch_npu.empty_with_format(shape, device="npu", acl_format=fmt)) == base
        y = x.npu()
        assert get_npu_format(y.npu_format_cast_(fmt)) == base
        # The plain formats are not affected.
        assert get_npu_format(npu_format_cast(x.npu(), 1)) == 1
    finally:
        torch.npu.config.allow_internal_format = before


def _collective_rank(rank, store, results):
    import torch.distributed as dist

    torch.npu.config.allow_internal_format = True
    torch.npu.set_device(rank)
    dist.init_process_group("hccl", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        x = npu_format_cast(torch.arange(24, dtype=torch.float32, device="npu").reshape(4, 6) * (rank + 1), 29)
        dist.all_reduce(x)
        gathered = [torch.empty(4, 6, device="npu") for _ in range(2)]
        dist.all_gather(gathered, x)
        b = npu_format_cast(torch.full((3, 5), float(rank), device="npu"), 3)
        dist.broadcast(b, src=1)
        results.put((rank, get_npu_format(x), x.cpu().tolist(), [g.cpu().tolist() for g in gathered],
                     get_npu_format(b), b.cpu().tolist()))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_collectives_read_and_write_private_formats_as_nd(tmp_path):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    ranks = [ctx.Process(target=_collective_rank, args=(r, str(tmp_path / "store"), results)) for r in range(2)]
    for p in ranks:
        p.start()
    try:
        got = dict((r[0], r[1:]) for r in (results.get(timeout=120) for _ in ranks))
    finally:
        for p in ranks:
            p.join(60)
            if p.is_alive():
                p.kill()
    expected = (torch.arange(24, dtype=torch.float32).reshape(4, 6) * 3).tolist()
    for rank in (0, 1):
        fmt, reduced, gathered, b_fmt, b = got[rank]
        assert fmt == 29 and reduced == expected and gathered == [expected, expected]  # in place: still NZ
        assert b_fmt == 3 and b == [[1.0] * 5] * 3
