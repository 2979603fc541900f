"""ACL's initialization as torch_npu configures it (softnpu/npu/acl_init.py): the aclInit configuration file named by
TORCH_ACL_INIT_CONFIG_PATH is checked when the device initializes, and ACL_OP_INIT_MODE is read then. The checks are
called directly here (with the variables set for the call, the cached mode restored after); two children show them
at a real initialization."""

import json

import pytest
import torch
from conftest import run_many
from softnpu.npu import acl_init, ascend

VALID = {"dump": {"dump_scene": "lite_exception"}, "defaultDevice": {"default_device": "0"}}


def _config(tmp_path, text):
    path = tmp_path / "acl.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text,error", [
    ("not a json{{{", "Failed to parse user acl json"),
    ("", "Failed to parse user acl json"),
    (json.dumps({"dump": {"dump_scene": "lite_exception"}}), "lacks 'defaultDevice' object"),
    (json.dumps({"defaultDevice": "0"}), "lacks 'defaultDevice' object"),
    (json.dumps([1, 2]), "lacks 'defaultDevice' object"),
    (json.dumps({"defaultDevice": {"default_device": "1"}}), "requires 'defaultDevice.default_device' to be \"0\""),
    (json.dumps({"defaultDevice": {"default_device": 0}}), "requires 'defaultDevice.default_device' to be \"0\""),
])
def test_a_bad_acl_init_config_is_a_runtime_error(tmp_path, monkeypatch, text, error):
    monkeypatch.setenv("TORCH_ACL_INIT_CONFIG_PATH", _config(tmp_path, text))
    with pytest.raises(RuntimeError, match=error):
        acl_init.check_init_config()


def test_acl_init_config_path(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_ACL_INIT_CONFIG_PATH", raising=False)
    assert acl_init.check_init_config() is None
    monkeypatch.setenv("TORCH_ACL_INIT_CONFIG_PATH", _config(tmp_path, json.dumps(VALID)))
    assert acl_init.check_init_config() == str((tmp_path / "acl.json").resolve())
    monkeypatch.setenv("TORCH_ACL_INIT_CONFIG_PATH", str(tmp_path / "absent.json"))
    with pytest.raises(RuntimeError, match="TORCH_ACL_INIT_CONFIG_PATH .*absent.json is invalid"):
        acl_init.check_init_config()
    monkeypatch.setenv("TORCH_ACL_INIT_CONFIG_PATH", str(tmp_path))  # a directory: cannot be opened as a file
    with pytest.raises(RuntimeError, match="Failed to open user acl json"):
        acl_init.check_init_config()


@pytest.fixture
def fresh_mode(monkeypatch):
    """acl_op_init_mode reads the variable once per process: forget the value for the test, restore it after."""
    monkeypatch.setattr(acl_init, "_acl_op_init_mode", None)
    monkeypatch.delenv("ACL_OP_INIT_MODE", raising=False)
    return monkeypatch


def test_acl_op_init_mode_values(fresh_mode):
    assert acl_init.acl_op_init_mode() == 1  # torch_npu's default for these chips on CANN 8.3.RC1 and later
    for text, mode in [("0", 0), ("1", 1), ("2", 2)]:
        fresh_mode.setattr(acl_init, "_acl_op_init_mode", None)
        fresh_mode.setenv("ACL_OP_INIT_MODE", text)
        assert acl_init.acl_op_init_mode() == mode


def test_acl_op_init_mode_out_of_range_warns_and_takes_the_default(fresh_mode):
    fresh_mode.setenv("ACL_OP_INIT_MODE", "999")
    with pytest.warns(UserWarning, match=r"Get env ACL_OP_INIT_MODE not in \[0, 1, 2\], so reset it to the default "
                                         r"value 1"):
        assert acl_init.acl_op_init_mode() == 1


def test_acl_op_init_mode_not_an_integer_is_an_error(fresh_mode):
    fresh_mode.setenv("ACL_OP_INIT_MODE", "bogus")
    with pytest.raises(RuntimeError, match="ACL_OP_INIT_MODE='bogus' is not an integer"):
        acl_init.acl_op_init_mode()


def test_aclops_disabled_keep_the_compile_mode(fresh_mode):
    fresh_mode.setitem(ascend._options, "jitCompile", "disable")  # torch_npu's default; restored after
    fresh_mode.setenv("ACL_OP_INIT_MODE", "2")
    torch.npu.set_compile_mode(jit_compile=False)  # no change: allowed
    with pytest.raises(RuntimeError, match="Jit compile set is disabled!"):
        torch.npu.set_compile_mode(jit_compile=True)
    assert torch.npu.is_jit_compile_false()


INIT = """
import torch, torch_npu
try:
    torch.npu.set_device(0)
    print("initialized", torch.ones(2, device="npu").sum().item())
except RuntimeError as e:
    print("RuntimeError", str(e).splitlines()[0])
"""


def test_initialization_runs_the_checks(tmp_path):
    bad = _config(tmp_path, json.dumps({"dump": {}}))
    refused, warned = run_many([(INIT, {"TORCH_ACL_INIT_CONFIG_PATH": bad}), (INIT, {"ACL_OP_INIT_MODE": "999"})])
    assert refused.lines[0].startswith(f"RuntimeError User acl json {bad} lacks 'defaultDevice' object"), \
        refused.describe()
    assert warned.lines == ["initialized 2.0"], warned.describe()
    assert "Get env ACL_OP_INIT_MODE not in [0, 1, 2]" in warned.stderr
