"""ais_bench over softnpu: InferSession against PyTorch's CPU ops, and `python -m ais_bench`'s summary."""
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import offline_models
from ais_bench.infer.interface import InferSession


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("om")
    return {"conv": offline_models.conv_net(d), "mlp": offline_models.mlp(d), "add_relu": offline_models.add_relu(d)}


def conv_reference(x, w):
    t = {k: torch.from_numpy(v) for k, v in w.items()}
    return F.linear(F.relu(F.conv2d(torch.from_numpy(x), t["W"], t["B"], padding=1)).mean((2, 3)), t["W2"], t["B2"])


def test_infer_session_static(models):
    path, w = models["conv"]
    session = InferSession(0, str(path))
    (i,), (o,) = session.get_inputs(), session.get_outputs()
    assert (i.name, i.shape, str(i.datatype), i.size) == ("x", [1, 3, 8, 8], "dtype.float32", 768)
    assert (o.name, o.shape, str(o.datatype)) == ("y", [1, 5], "dtype.float32")
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)
        (y,) = session.infer([x])
        np.testing.assert_allclose(y, conv_reference(x, w).numpy(), rtol=1e-5, atol=1e-5)
    assert len(session.summary().exec_time_list) == 3
    with pytest.raises(ValueError, match="float32"):
        session.infer([np.zeros((1, 3, 8, 8), np.float64)])
    with pytest.raises(ValueError, match="1 inputs"):
        session.infer([])
    session.free_resource()
    with pytest.raises(RuntimeError, match="free_resource"):
        session.infer([x])


def test_free_resource_gives_back_the_threads_context(models):
    import acl
    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    context, ret = acl.rt.get_context()
    assert ret == 0
    session = InferSession(0, str(models["conv"][0]))
    assert acl.rt.get_context()[0] != context  # the session's own while it lives
    session.free_resource()
    assert acl.rt.get_context() == (context, 0)
    p, ret = acl.rt.malloc(1024, 0)
    assert ret == 0 and acl.rt.free(p) == 0


def test_infer_session_dynamic(models):
    path, w = models["mlp"]
    session = InferSession(0, str(path))
    assert [t.name for t in session.get_inputs()] == ["x"]  # the dynamic tensor is the session's business
    for batch in (8, 1, 4):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        (y,) = session.infer([x], mode="dymbatch")
        ref = F.relu(torch.from_numpy(x) @ torch.from_numpy(w["W"]) + torch.from_numpy(w["b"]))
        np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="not one of the model's"):
        session.infer([np.zeros((3, 16), np.float32)], mode="dymbatch")
    session.free_resource()

    session = InferSession(0, str(models["add_relu"]))
    x, z = np.full((4, 5), -1.0, np.float32), np.arange(20, dtype=np.float32).reshape(4, 5)
    (y,) = session.infer([x, z], mode="dymdims")
    np.testing.assert_array_equal(y, (torch.relu(torch.from_numpy(x)) + torch.from_numpy(z)).numpy())
    session.free_resource()


def test_ais_bench_command_prints_the_summary(models):
    path, _ = models["mlp"]
    r = subprocess.run([sys.executable, "-m", "ais_bench", "--model", str(path), "--loop", "5", "--dymBatch", "4"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    m = re.search(r"NPU_compute_time \(ms\): min = ([\d.]+), max = ([\d.]+), mean = ([\d.]+), median = ([\d.]+), "
                  r"percentile\(99%\) = ([\d.]+)", r.stdout)
    assert m, r.stdout
    lo, hi, mean, median, p99 = map(float, m.groups())
    assert 0 < lo <= median <= hi and lo <= mean <= hi and median <= p99 <= hi
    for latency in ("H2D_latency", "D2H_latency"):
        assert re.search(latency + r" \(ms\): min = [\d.]+, max = [\d.]+, mean = [\d.]+", r.stdout), r.stdout
    t = re.search(r"throughput 1000\*batchsize\.mean\(4\)/NPU_compute_time\.mean\(([\d.]+)\): ([\d.]+)", r.stdout)
    assert t, r.stdout
    shown_mean = float(t.group(1))  # rounded to 4 decimals
    assert 4000 / (shown_mean + 5e-5) <= float(t.group(2)) <= 4000 / (shown_mean - 5e-5)

    r = subprocess.run([sys.executable, "-m", "ais_bench", "--model", str(path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and "--dymBatch" in r.stderr
