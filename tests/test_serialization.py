"""torch.save / torch.load of npu tensors and modules, with and without map_location."""

import io

import pytest
import torch
from conftest import run_python


def _round_trip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_npu_tensor_loads_back_on_its_device():
    c = torch.randn(3, 4)
    for device in ("npu:0", "npu:1"):
        loaded = _round_trip(c.to(device))
        assert loaded.device == torch.device(device)
        assert torch.equal(loaded.cpu(), c)


def test_map_location():
    c = torch.randn(5, 2)
    x = c.npu()
    for location, expected in (
        ("cpu", "cpu"),
        (torch.device("cpu"), "cpu"),
        ("npu:1", "npu:1"),
        (torch.device("npu", 1), "npu:1"),
        ({"npu:0": "npu:1"}, "npu:1"),
        (lambda storage, loc: storage, "cpu"),
    ):
        loaded = _round_trip(x, map_location=location)
        assert loaded.device == torch.device(expected), location
        assert torch.equal(loaded.cpu(), c)
    # And a CPU checkpoint onto the npu.
    assert _round_trip(c, map_location="npu").device == torch.device("npu:0")


def test_views_keep_sharing_storage_and_dtypes_survive():
    x = torch.arange(12, device="npu").reshape(3, 4)
    loaded = _round_trip({"base": x, "row": x[1], "t": x.t(), "h": x.half(), "b": x > 5})
    base, row = loaded["base"], loaded["row"]
    assert base.untyped_storage().data_ptr() == row.untyped_storage().data_ptr()
    assert torch.equal(row.cpu(), torch.arange(4, 8))
    assert loaded["t"].stride() == (1, 4) and torch.equal(loaded["t"].cpu(), x.cpu().t())
    assert loaded["h"].dtype == torch.float16 and loaded["b"].dtype == torch.bool
    base[1, 0] = -1  # still one storage after loading
    assert row[0].item() == -1


def test_module_state_dict_round_trip():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)).npu()
    model(torch.randn(6, 4).npu())  # updates BatchNorm's running stats (buffers are saved too)
    # Saving while BatchNorm's num_batches_tracked.add_(1) is queued can deadlock (see
    # test_save_while_a_kernel_holding_a_python_scalar_is_queued); a hang here would stop the whole suite.
    torch.npu.synchronize()
    state = _round_trip(model.state_dict())
    assert all(v.device == torch.device("npu:0") for v in state.values())
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)).npu()
    fresh.load_state_dict(state)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu()), name
    # Onto the CPU, for a CPU model.
    cpu_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    cpu_model.load_state_dict(_round_trip(model.state_dict(), map_location="cpu"))
    model.eval()
    cpu_model.eval()
    data = torch.randn(3, 4)
    torch.testing.assert_close(model(data.npu()).cpu(), cpu_model(data))


def test_save_to_a_file(tmp_path):
    x = torch.randn(4, 4, device="npu:1")
    path = tmp_path / "t.pt"
    torch.save({"x": x, "step": 3}, path)
    loaded = torch.load(path, map_location="npu:0")
    assert loaded["step"] == 3 and loaded["x"].device == torch.device("npu:0")
    assert torch.equal(loaded["x"].cpu(), x.cpu())


def test_save_while_a_kernel_holding_a_python_scalar_is_queued():
    # In a child, with a timeout: the deadlock would hang this process.
    result = run_python(
        """
        import io, torch, torch_npu
        for n in range(1, 7):
            x = torch.zeros(n, device="npu")  # a new shape each time: the op's meta inference runs again
            torch.npu._sleep(300_000_000)  # the stream stays busy past the host's next steps
            x.add_(1)  # a Python scalar, held by the queued kernel
            torch.save(x, io.BytesIO())  # copies x's storage to the host, waiting for the stream
        print(x.sum().item())
        """,
        timeout=20,
    )
    assert result.lines == ["6.0"]
