"""torch_npu's compute+communication ops (csrc/fused/communication/): npu_mm_all_reduce_base, npu_all_gather_base_mm,
npu_mm_reduce_scatter_base over softnpu's hccl process group.

Two worker processes (rank r on npu:r) join an hccl group and call each op in torch_npu's documented form (the hcom
from ``group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)``); every rank knows every rank's inputs
(seeded), so each checks its result against a reference computed here on the CPU: the ranks' products in float32,
rounded to the input dtype, then summed or stacked. Meta shapes and errors at the call run in this process.
"""

import json

import pytest
import torch
import torch_npu
from conftest import start_python

WORLD = 2


def inputs(rank, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(100 + rank)
    return (torch.randn(4, 32, generator=g).to(dtype), torch.randn(32, 6, generator=g).to(dtype),
            torch.randn(6, generator=g).to(dtype), torch.randn(4, 6, generator=g).to(dtype))


def local_product(x1, x2, bias=None, x3=None):
    """One rank's x1 @ x2 (+ bias + x3) as the chip computes it: float32 accumulation, one rounding."""
    out = x1.float() @ x2.float()
    if bias is not None:
        out = out + bias.float()
    if x3 is not None:
        out = out + x3.float()
    return out.to(x1.dtype)


def _worker(rank, workdir):
    import torch.distributed as dist

    torch.npu.set_device(rank)
    results = {}
    dist.init_process_group("hccl", init_method=f"file://{workdir}/store", rank=rank, world_size=WORLD)
    try:
        hcom = dist.group.WORLD._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
        x1, x2, bias, x3 = inputs(rank)
        everyone = [inputs(r) for r in range(WORLD)]

        out = torch_npu.npu_mm_all_reduce_base(x1.npu(), x2.npu(), hcom, reduce_op="sum", bias=bias.npu(),
                                               x3=x3.npu())
        want = sum(local_product(*e).float() for e in everyone).to(x1.dtype)
        results["mm_all_reduce"] = torch.equal(out.cpu(), want)

        # the same x2 on every rank (a column-parallel weight), x1 gathered
        out, gathered = torch_npu.npu_all_gather_base_mm(x1.npu(), x2.npu(), hcom, WORLD, bias=bias.npu(),
                                                         gather_index=0, gather_output=True)
        all_x1 = torch.cat([e[0] for e in everyone])
        results["all_gather_mm"] = (torch.equal(gathered.cpu(), all_x1)
                                    and torch.equal(out.cpu(), local_product(all_x1, x2, bias)))
        _, empty = torch_npu.npu_all_gather_base_mm(x1.npu(), x2.npu(), hcom, WORLD, gather_output=False)
        results["all_gather_mm_no_output"] = empty.numel() == 0

        out = torch_npu.npu_mm_reduce_scatter_base(x1.npu(), x2.npu(), hcom, WORLD, reduce_op="sum", bias=bias.npu())
        summed = sum(local_product(e[0], e[1], e[2]).float() for e in everyone).to(x1.dtype)
        results["mm_reduce_scatter"] = torch.equal(out.cpu(), summed.chunk(WORLD)[rank])

        # weight-only int8 x2 (MatmulAllReduce's antiquant form)
        w8 = torch.randint(-128, 128, (32, 6), dtype=torch.int8, generator=torch.Generator().manual_seed(7 + rank))
        scale = torch.rand(6, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16) * 0.05
        out = torch_npu.npu_mm_all_reduce_base(x1.npu(), w8.npu(), hcom, antiquant_scale=scale.npu())
        want = sum(torch_npu.npu_weight_quant_batchmatmul(
            e[0], torch.randint(-128, 128, (32, 6), dtype=torch.int8,
                                generator=torch.Generator().manual_seed(7 + r)), scale).float()
            for r, e in enumerate(everyone)).to(x1.dtype)
        results["mm_all_reduce_antiquant"] = torch.equal(out.cpu(), want)
        torch.npu.synchronize()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(f"{workdir}/rank{rank}.json", "w") as f:
        json.dump(results, f)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fused_comm")
    workers = [start_python(f"import test_fused_comm; test_fused_comm._worker({r}, {str(workdir)!r})", timeout=120)
               for r in range(WORLD)]
    for w in workers:
        w.wait()
    return [json.loads((workdir / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.parametrize("name", ["mm_all_reduce", "all_gather_mm", "all_gather_mm_no_output", "mm_reduce_scatter",
                                  "mm_all_reduce_antiquant"])
def test_compute_communication_ops_on_two_ranks(outcomes, name):
    for rank in range(WORLD):
        assert outcomes[rank][name] is True, f"rank {rank}: {name}"


def test_meta_shapes_and_errors_at_the_call():
    x1, x2 = torch.empty(4, 32, dtype=torch.half, device="meta"), torch.empty(32, 6, dtype=torch.half, device="meta")
    assert torch_npu.npu_mm_all_reduce_base(x1, x2, "g").shape == (4, 6)
    out, gathered = torch_npu.npu_all_gather_base_mm(x1, x2, "g", 4)
    assert out.shape == (16, 6) and gathered.shape == (16, 32)
    assert torch_npu.npu_mm_reduce_scatter_base(x1, x2, "g", 2).shape == (2, 6)
    for device in ("meta", "npu"):
        a, b = torch.zeros(4, 32, dtype=torch.half, device=device), torch.zeros(32, 6, dtype=torch.half, device=device)
        with pytest.raises(RuntimeError, match="npu_mm_all_reduce_base: reduce_op only supports 'sum'"):
            torch_npu.npu_mm_all_reduce_base(a, b, "g", reduce_op="max")
        with pytest.raises(RuntimeError, match="npu_all_gather_base_mm: x1's k"):
            torch_npu.npu_all_gather_base_mm(a, b[:16], "g", 2)
        with pytest.raises(RuntimeError, match="npu_mm_reduce_scatter_base: x1's m \\(4\\) must be a multiple"):
            torch_npu.npu_mm_reduce_scatter_base(a, b, "g", 3)
        with pytest.raises(RuntimeError, match="npu_mm_reduce_scatter_base: x1 must be float16 or bfloat16"):
            torch_npu.npu_mm_reduce_scatter_base(a.float(), b, "g", 2)
    with pytest.raises(RuntimeError, match="npu_mm_all_reduce_base: hcom 'nowhere' names no process group"):
        torch_npu.npu_mm_all_reduce_base(torch.zeros(4, 32, dtype=torch.half).npu(),
                                         torch.zeros(32, 6, dtype=torch.half).npu(), "nowhere")
