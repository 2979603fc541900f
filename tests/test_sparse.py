"""Sparse COO tensors on npu (csrc/backend/ops/sparse.cpp): each op against the CPU path, read back; which ops are
sync points (a sparse result's size depends on the data) and which are not; the errors users rely on."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def sync_points():
    return torch.npu.sync_points()["total"]


def coo(dense_dim=0, dtype=torch.float32):
    """A 4x5 COO tensor (with duplicate indices, uncoalesced) and, for dense_dim=1, a values dimension of 3."""
    indices = torch.tensor([[0, 1, 3, 0, 2, 3], [1, 4, 0, 1, 2, 0]])
    shape = (6,) if dense_dim == 0 else (6, 3)
    values = torch.arange(1, 1 + torch.Size(shape).numel(), dtype=dtype).reshape(shape) / 4
    size = (4, 5) if dense_dim == 0 else (4, 5, 3)
    return torch.sparse_coo_tensor(indices, values, size, check_invariants=True)


def assert_same_sparse(npu, cpu):
    assert npu.device.type == "npu" and npu.layout == torch.sparse_coo
    assert npu.is_coalesced() == cpu.is_coalesced()
    torch.testing.assert_close(npu.cpu().coalesce().to_dense(), cpu.coalesce().to_dense())


def test_table_of_sparse_ops_matches_installed_torch(tmp_path):
    out = tmp_path / "sparse_ops.def"
    subprocess.run([sys.executable, str(ROOT / "csrc/backend/ops/gen_sparse_ops.py"), str(out)], check=True)
    assert out.read_text() == (ROOT / "csrc/backend/ops/sparse_ops.def").read_text(), (
        "regenerate csrc/backend/ops/sparse_ops.def with gen_sparse_ops.py")


@pytest.mark.parametrize("dense_dim", [0, 1])
def test_to_npu_and_back_keeps_the_parts(dense_dim):
    s = coo(dense_dim)
    n = s.npu()
    assert n.is_sparse and n.device == torch.device("npu:0")
    assert (n.sparse_dim(), n.dense_dim(), n._nnz(), n.shape) == (s.sparse_dim(), s.dense_dim(), s._nnz(), s.shape)
    assert n._indices().device.type == "npu" and n._values().device.type == "npu"
    assert torch.equal(n._indices().cpu(), s._indices()) and torch.equal(n._values().cpu(), s._values())
    back = n.cpu()
    assert back.layout == torch.sparse_coo and torch.equal(back.to_dense(), s.to_dense())
    made = torch.sparse_coo_tensor(s._indices().npu(), s._values().npu(), s.shape, check_invariants=False)
    assert made.device.type == "npu" and torch.equal(made.to_dense().cpu(), s.to_dense())
    assert torch.equal(torch.sparse_coo_tensor(s._indices(), s._values(), s.shape, device="npu", check_invariants=True).to_dense().cpu(),
                       s.to_dense())


@pytest.mark.parametrize("dense_dim", [0, 1])
def test_coalesce_is_a_counted_sync_point_and_equals_the_cpu(dense_dim):
    s = coo(dense_dim)
    n = s.npu()
    before = torch.npu.sync_points()["by_op"].get("aten::_coalesce", 0)
    c, expected = n.coalesce(), s.coalesce()
    assert torch.npu.sync_points()["by_op"]["aten::_coalesce"] == before + 1
    assert c.is_coalesced() and c._nnz() == expected._nnz()
    assert torch.equal(c.indices().cpu(), expected.indices()) and torch.equal(c.values().cpu(), expected.values())
    assert c.coalesce() is c  # coalesced already: no kernel


def test_ops_with_dense_results_are_asynchronous_and_equal_the_cpu():
    s, d = coo(), torch.randn(5, 3)
    x, bias = torch.randn(4, 5), torch.randn(4, 3)
    n = s.npu()
    torch.npu.synchronize()
    before = sync_points()
    results = {
        "to_dense": (n.to_dense(), s.to_dense()),
        "sparse.mm": (torch.sparse.mm(n, d.npu()), torch.sparse.mm(s, d)),
        "mm": (n @ d.npu(), s @ d),
        "sparse.addmm": (torch.sparse.addmm(bias.npu(), n, d.npu(), beta=0.5, alpha=2),
                         torch.sparse.addmm(bias, s, d, beta=0.5, alpha=2)),
        "addmm": (torch.addmm(bias.npu(), n, d.npu()), torch.addmm(bias, s, d)),
        "dense + sparse": (x.npu() + n, x + s),
        "dense.add_(sparse)": (x.npu().add_(n, alpha=-3), x.clone().add_(s, alpha=-3)),
        "sum": (n.sum(), s.sum()),
        "sparse.sum(dense dim)": (torch.sparse.sum(coo(1).npu(), dim=(0, 1)), torch.sparse.sum(coo(1), dim=(0, 1))),
        "bmm": (torch.bmm(torch.stack([s, s]).npu(), torch.randn(2, 5, 3).npu() * 0 + 1),
                torch.bmm(torch.stack([s, s]), torch.ones(2, 5, 3))),
    }
    assert sync_points() == before  # none waited for the device
    for name, (got, expected) in results.items():
        assert got.device.type == "npu" and got.layout == torch.strided, name
        torch.testing.assert_close(got.cpu(), expected, msg=name)


def test_ops_with_sparse_results_equal_the_cpu():
    s, t = coo(), coo() * 2
    n, m = s.npu(), t.npu()
    assert_same_sparse(n + m, s + t)
    assert_same_sparse(n - m, s - t)
    assert_same_sparse(n * m, s * t)
    assert_same_sparse(n * 3, s * 3)
    assert_same_sparse(-n, -s)
    assert_same_sparse(n.sqrt(), s.sqrt())
    assert_same_sparse(n.t(), s.t())
    assert_same_sparse(torch.sparse.sum(n, dim=1), torch.sparse.sum(s, dim=1))
    idx = torch.tensor([3, 0, 3])
    assert_same_sparse(n.index_select(0, idx.npu()), s.index_select(0, idx))
    assert_same_sparse(torch.sparse.softmax(n, 1), torch.sparse.softmax(s, 1))
    acc = n.clone()
    acc.add_(m)  # a sparse tensor written in place takes the kernel's new parts
    assert_same_sparse(acc, s + t)
    x = torch.randn(4, 5)
    assert_same_sparse(x.npu().to_sparse(), x.to_sparse())
    assert_same_sparse(x.npu().sparse_mask(n.coalesce()), x.sparse_mask(s.coalesce()))


# ATen's device-generic sparse kernels (on the values, or metadata) and the device-specific ones, on a sample each.
SPARSE_OPS = {
    "abs": lambda s: s.abs(), "div_": lambda s: s.clone().div_(2), "floor_divide": lambda s: s // 2,
    "erfinv": lambda s: (s / 10).erfinv(), "nan_to_num": lambda s: s.nan_to_num(), "pow": lambda s: s.pow(2),
    "isinf": lambda s: s.isinf(), "narrow_copy": lambda s: s.narrow_copy(1, 1, 3), "permute": lambda s: s.permute(1, 0),
    "unsqueeze": lambda s: s.unsqueeze(0), "cat": lambda s: torch.cat([s, s], 1), "zero_": lambda s: s.clone().zero_(),
    "copy_": lambda s: torch.zeros_like(s).copy_(s), "resize_as_": lambda s: torch.sparse_coo_tensor(size=(2, 2), device=s.device).resize_as_(s),
    "broadcast_to": lambda s: torch._sparse_broadcast_to(s.unsqueeze(0), (3, 4, 5)),
    "to_sparse(1)": lambda s: s.coalesce().to_dense().to_sparse(1), "mv": lambda s: s.mv(torch.arange(5.0, device=s.device)),
    "norm": lambda s: s.norm(), "any": lambda s: s.any(), "sparse_mask(sparse)": lambda s: (s * 2).sparse_mask(s.coalesce()),
    "mul(dense)": lambda s: s * torch.arange(20.0, device=s.device).reshape(4, 5),
    "log_softmax": lambda s: torch.sparse.log_softmax(s, 0), "hspmm": lambda s: torch.hspmm(s, torch.ones(5, 2, device=s.device)),
    "smm (sspaddmm, self is out)": lambda s: torch.smm(s, torch.ones(5, 2, device=s.device)),
    "sparse @ sparse": lambda s: torch.sparse.mm(s, s.t()),
}


@pytest.mark.parametrize("name", list(SPARSE_OPS))
def test_sparse_op_equals_the_cpu(name):
    s = coo()
    expected, got = SPARSE_OPS[name](s), SPARSE_OPS[name](s.npu())
    assert got.device.type == "npu" and got.layout == expected.layout
    if expected.is_sparse:
        expected, got = expected.coalesce().to_dense(), got.cpu().coalesce().to_dense()
    torch.testing.assert_close(got.cpu(), expected)


def test_mm_backward_through_a_sparse_matrix():
    s, d = coo(), torch.randn(5, 3)
    grads = []
    for device in ("cpu", "npu"):
        w = d.to(device).detach().requires_grad_()
        torch.sparse.mm(s.to(device), w).pow(2).sum().backward()
        grads.append(w.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


def test_max_is_torch_npus_the_maximum_of_the_dense_form():
    negative = -coo()  # every stored value negative: the implicit zeros are the maximum
    assert negative.npu().max().cpu().item() == 0.0 == negative.to_dense().max().item()
    assert coo().npu().max().cpu().item() == coo().to_dense().max().item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_coalesce_sums_in_float32_and_rounds_once(dtype):
    torch.manual_seed(0)
    indices, values = torch.randint(0, 8, (2, 4000)), torch.randn(4000).to(dtype)
    npu = torch.sparse_coo_tensor(indices.npu(), values.npu(), (8, 8)).coalesce()
    float32 = torch.sparse_coo_tensor(indices, values.float(), (8, 8)).coalesce()
    assert npu.dtype == dtype
    assert torch.equal(npu._indices().cpu(), float32._indices())
    assert torch.equal(npu._values().cpu(), float32._values().to(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_sparse_sums_in_float32_and_rounds_once(dtype):
    # sparse + sparse in float16, which the CPU refuses, as the accelerators do it.
    torch.manual_seed(0)
    indices, values = torch.randint(0, 8, (2, 3000)), torch.randn(3000).to(dtype)
    a, b = torch.sparse_coo_tensor(indices, values, (8, 8)), torch.sparse_coo_tensor(indices.flip(0), values, (8, 8))
    expected = (a.float() + b.float()).coalesce()._values().to(dtype)
    in_place = a.npu().clone()
    in_place.add_(b.npu())
    for result in ((a.npu() + b.npu()), in_place):
        assert result.dtype == dtype
        assert torch.equal(result.coalesce()._values().cpu(), expected)


def test_sparse_embedding_bag_gradient_equals_the_cpu():
    grads = []
    for device in ("cpu", "npu"):
        torch.manual_seed(0)
        bag = torch.nn.EmbeddingBag(10, 3, mode="mean", sparse=True).to(device)
        bag(torch.tensor([1, 2, 4, 5, 4, 3], device=device), torch.tensor([0, 3], device=device)).pow(2).sum().backward()
        assert bag.weight.grad.is_sparse
        grads.append(bag.weight.grad.cpu().to_dense())
    torch.testing.assert_close(grads[1], grads[0])


def test_in_place_sum_into_a_tensor_the_kernel_also_reads():
    # add_ runs add.out(self, other, out=self): the kernel resizes the parts of the tensor it reads (sparse_dim 0).
    values = torch.randn(1, 4, 3)
    x, y = (torch.sparse_coo_tensor(torch.zeros(0, 1, dtype=torch.long), v, (4, 3)) for v in (values, values * 2))
    expected = y.clone().add_(x)
    got = y.npu()
    got.add_(x.npu())
    torch.testing.assert_close(got.cpu().to_dense(), expected.to_dense())


def test_invariant_checks_of_npu_parts():
    s = coo().coalesce()
    with torch.sparse.check_sparse_tensor_invariants():
        made = torch.sparse_coo_tensor(s._indices().npu(), s._values().npu(), s.shape, is_coalesced=True)
        assert made.is_coalesced() and torch.equal(made.to_dense().cpu(), s.to_dense())
        broadcast = torch._sparse_broadcast_to(made.unsqueeze(0), (2, 4, 5))
        assert torch.equal(broadcast.to_dense().cpu(), s.to_dense().expand(2, 4, 5))
        with pytest.raises(RuntimeError, match="cannot set is_coalesced to true if indices correspond to uncoalesced"):
            torch.sparse_coo_tensor(coo()._indices().npu(), coo()._values().npu(), (4, 5), is_coalesced=True)


def test_sparse_tensors_are_made_on_their_tensors_device():
    dense = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]], device="npu:1")
    with torch.npu.device(0):
        for sparse in (dense.to_sparse(), dense.to_sparse(1), torch.sparse_coo_tensor(
                torch.tensor([[0, 1]], device="npu:1"), torch.ones(2, device="npu:1"), (3,))):
            assert sparse.device == sparse._indices().device == sparse._values().device == torch.device("npu:1")
            assert (sparse + sparse).coalesce()._values().device == torch.device("npu:1")


def test_gradients_of_the_values_equal_the_cpu():
    indices, values = coo()._indices(), coo()._values()
    for reduce in (lambda s: (torch.sparse.sum(s, dim=1).to_dense() ** 2).sum(),
                   lambda s: (s.to_dense() * torch.arange(20.0, device=s.device).reshape(4, 5)).sum()):
        grads = []
        for device in ("cpu", "npu"):
            v = values.detach().clone().to(device).requires_grad_()
            reduce(torch.sparse_coo_tensor(indices.to(device), v, (4, 5))).backward()
            grads.append(v.grad.cpu())
        torch.testing.assert_close(grads[1], grads[0])


def test_sparse_kernels_are_not_captured_in_npu_graphs():
    n = coo().npu()
    graph = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match="aten::_coalesce on sparse tensors cannot be captured in an NPU graph"):
        with torch.npu.graph(graph):
            n.coalesce()
    assert torch.equal(n.coalesce().to_dense().cpu(), coo().to_dense())


@pytest.mark.parametrize("optimizer, kwargs", [
    (torch.optim.SGD, {"lr": 0.1}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    (torch.optim.Adagrad, {"lr": 0.1}),
    (torch.optim.SparseAdam, {"lr": 0.05}),
])
def test_sparse_embedding_training_equals_the_cpu(optimizer, kwargs):
    def train(device):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(12, 4, sparse=True).to(device)
        opt = optimizer(emb.parameters(), **kwargs)
        idx = torch.tensor([[1, 2, 4, 1], [4, 3, 2, 11]], device=device)
        for _ in range(3):
            opt.zero_grad()
            (emb(idx) ** 2).sum().backward()
            assert emb.weight.grad.is_sparse and emb.weight.grad.device.type == device
            opt.step()
        return emb.weight.detach().cpu(), emb.weight.grad.cpu().to_dense()

    (w_cpu, g_cpu), (w_npu, g_npu) = train("cpu"), train("npu")
    torch.testing.assert_close(g_npu, g_cpu)
    torch.testing.assert_close(w_npu, w_cpu)


@pytest.mark.parametrize("accessor", ["crow_indices", "col_indices", "ccol_indices", "row_indices"])
def test_compressed_accessors_raise_atens_error(accessor):
    n = coo().coalesce().npu()
    with pytest.raises(RuntimeError, match=f"{accessor} expected sparse .* layout but got Sparse"):
        getattr(n, accessor)()


def test_unsupported_ops_raise_naming_the_op():
    n = coo().npu()
    with pytest.raises(NotImplementedError, match=r"aten::_to_sparse_csr' with arguments from the 'SparseNPU' backend"):
        n.to_sparse_csr()
    with pytest.raises(NotImplementedError, match=r"aten::_to_sparse_csr.*sparse COO layout .* only, not CSR"):
        torch.randn(3, 3).npu().to_sparse_csr()
    with pytest.raises(NotImplementedError, match=r"aten::_to_sparse.*sparse COO layout .* only, not CSR"):
        torch.randn(3, 3).npu().to_sparse(layout=torch.sparse_csr)
    with pytest.raises(NotImplementedError, match=r"aten::argmax' with arguments from the 'SparseNPU' backend: npu has no kernel"):
        n.argmax()  # no sparse kernel (the CPU has none either)
    assert issubclass(NotImplementedError, RuntimeError)


def test_kernel_errors_raise_at_the_call():
    n = coo().npu()
    with pytest.raises(IndexError, match="index contains 7 that is out of range"):
        n.index_select(0, torch.tensor([7]).npu())
    with pytest.raises(RuntimeError, match="add: expected 'self' and 'other' to have same size"):
        torch.zeros(1, 5).npu().add_(n)  # an asynchronous launch: checked before it
    with pytest.raises(RuntimeError, match="same device"):
        torch.addmm(torch.zeros(4, 3), n, torch.ones(5, 3).npu())
    assert torch.equal((n * 2).to_dense().cpu(), (coo() * 2).to_dense())  # the stream goes on
