"""Fixtures every torch.compile test module uses: imported by name into the module, they apply to its tests only."""
import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def inductor_cache(tmp_path_factory):
    """A fresh Inductor cache directory per module, so no test reads another's compiled code."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
