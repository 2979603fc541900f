"""torch_npu's modules follow PyTorch's public-API rule as torch_npu's do: a public name (in `__all__`, or any name
of a module without one) has a `__module__` inside the module that lists it, and what a module imports for itself is
not public. The ops are the one exception, as in torch_npu (which allowlists them): their home is torch.ops.<namespace>
(or softnpu.fused, for the few that are Python functions over it). torch_npu.__all__ is torch_npu's: erase_stream and
the ops its build marks exposed."""

import importlib
import pickle
import pkgutil

import pytest
import torch
import torch_npu
import torch_npu.testing
from softnpu.exposed_api import public_npu_functions


def _torch_npu_modules():
    """torch_npu and the public modules of its own tree (the modules aliased from softnpu are softnpu's)."""
    names = ["torch_npu"]
    for info in pkgutil.walk_packages(torch_npu.__path__, "torch_npu."):
        if not any(part.startswith("_") for part in info.name.split(".")) and info.name != \
                "torch_npu.contrib.transfer_to_npu":  # importing it patches torch.cuda: tests/test_transfer_to_npu.py
            names.append(info.name)
    return names


def _refused(modname):
    """The names of `modname` that PyTorch's public-API rule refuses (the ops aside)."""
    mod = importlib.import_module(modname)
    public = getattr(mod, "__all__", None)
    refused = []
    for name in dir(mod):
        if public is None and name.startswith("_"):
            continue
        obj = getattr(mod, name)
        if isinstance(obj, torch._ops.OpOverloadPacket) or (mod is torch_npu and name in public_npu_functions):
            continue
        if not (callable(obj) or isinstance(obj, torch.dtype)):
            continue
        home = getattr(obj, "__module__", None) or ""
        looks_public = not name.startswith("_") and home.startswith(modname) and "._" not in home
        if looks_public != (public is None or name in public):
            refused.append(f"{modname}.{name} (__module__ {home})")
    return refused


@pytest.mark.parametrize("modname", _torch_npu_modules())
def test_public_names_live_where_they_are_listed(modname):
    assert _refused(modname) == []


def test_torch_npu_all_is_erase_stream_and_the_exposed_ops():
    exported = [n for n in public_npu_functions if hasattr(torch_npu, n)]
    assert torch_npu.__all__ == ["erase_stream", *exported]
    assert {"npu_rms_norm", "npu_fusion_attention", "npu_swiglu"} <= set(torch_npu.__all__)
    # Backward ops and formats are attributes, not public names, as in torch_npu.
    for name in ("npu_rms_norm_backward", "npu_fusion_attention_grad", "Format", "get_npu_format"):
        assert hasattr(torch_npu, name) and name not in torch_npu.__all__, name
    assert torch_npu.npu_rms_norm is torch.ops.npu.npu_rms_norm
    # torch_npu's own name for the list.
    from torch_npu.utils.exposed_api import public_npu_functions as listed

    assert listed is public_npu_functions


def test_erase_stream_is_torch_npus():
    # Its effect on the allocator is tested in test_streams_events.py.
    assert torch_npu.erase_stream.__module__ == "torch_npu" and torch_npu.erase_stream.__doc__
    assert pickle.loads(pickle.dumps(torch_npu.erase_stream)) is torch_npu.erase_stream


def test_testing_is_torch_npus_own_module():
    from torch_npu.testing import common_utils, testcase

    assert testcase.TestCase.__module__ == "torch_npu.testing.testcase"
    assert common_utils.create_common_tensor.__module__ == "torch_npu.testing.common_utils"
    assert "test_seed" not in testcase.__all__ and "test_seed" in common_utils.__all__


def test_multiprocessing_holds_only_reductions():
    import torch_npu.multiprocessing as mp
    from torch_npu.multiprocessing import reductions

    assert [n for n in dir(mp) if not n.startswith("_")] == ["reductions"]
    assert reductions.__all__ == ["rebuild_npu_tensor"]
    # An npu tensor's pickle names the rebuild function by its public home, which resolves to the same function.
    rebuild, args = reductions.reduce_tensor(torch.arange(4.0, device="npu"))
    assert pickle.loads(pickle.dumps(rebuild)) is rebuild
