"""torch_npu.testing's helpers keep their promises: assertRtolEqual fails what torch_npu's fails, the input makers
give the same values on both devices, the decorators name tests as torch_npu's do, the variables are honoured."""

import os
import sys
import unittest

import numpy as np
import pytest
import torch

from conftest import REPO, run_python
from torch_npu.testing.common_utils import SupportedDevices, create_common_tensor, create_dtype_tensor
from torch_npu.testing.decorator import Dtypes, Formats, instantiate_tests
from torch_npu.testing.testcase import TestCase


class _Probe(TestCase):
    def runTest(self):
        pass


@pytest.fixture
def case():
    return _Probe()


def test_rtol_equal_accepts_agreement_and_rejects_disagreement(case):
    x = torch.linspace(1, 2, 10000)
    case.assertRtolEqual(x, x.npu() * (1 + 5e-5))  # inside the relative tolerance
    case.assertRtolEqual(x.numpy(), x.clone().index_fill_(0, torch.tensor([3]), 9.0).npu())  # 1 of 10000 may miss
    with pytest.raises(AssertionError, match="result error"):
        case.assertRtolEqual(x, x.clone().index_fill_(0, torch.tensor([3, 7]), 9.0).npu())  # 2 may not
    with pytest.raises(AssertionError, match="result error"):
        case.assertRtolEqual(x, x.npu() * 1.01)


def test_rtol_equal_checks_shape_dtype_nans_and_half_tolerance(case):
    with pytest.raises(AssertionError, match="shape error"):
        case.assertRtolEqual(torch.ones(3), torch.ones(4).npu())
    with pytest.raises(AssertionError, match="dtype error"):
        case.assertRtolEqual(torch.ones(3), torch.ones(3, dtype=torch.float64).npu())
    case.assertRtolEqual(torch.ones(3), torch.ones(3, dtype=torch.float64).npu(), auto_trans_dtype=True)
    with pytest.raises(AssertionError, match="NaN"):
        case.assertRtolEqual(torch.tensor([1.0, float("nan")]), torch.tensor([float("nan"), 1.0]).npu())
    case.assertRtolEqual(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]).npu())
    half = torch.full((100,), 1000.0, dtype=torch.half)
    case.assertRtolEqual(half, (half.float() + 0.5).half().npu())  # 5e-4 relative: within prec16
    with pytest.raises(AssertionError):
        case.assertRtolEqual(half, (half.float() + 0.5).half().npu(), prec16=1e-4)
    with pytest.raises(AssertionError, match="booleans"):
        case.assertRtolEqual(torch.tensor([True, False]), torch.tensor([True, True]).npu())
    case.assertRtolEqual([torch.ones(2), 3.0], [torch.ones(2).npu(), 3.0])


def test_assert_equal_takes_torch_npus_prec(case):
    a = torch.ones(4)
    case.assertEqual(a, a.npu() + 1e-4, 1e-3)
    with pytest.raises(AssertionError):
        case.assertEqual(a, a.npu() + 1e-2, 1e-3)
    case.assertEqual(a.half(), a.npu())  # dtypes are loose unless exact_dtype
    with pytest.raises(AssertionError):
        case.assertEqual(a.half(), a.npu(), exact_dtype=True)
    case.assertEqual(torch.tensor(2.5).npu(), 2.5)


def test_assert_almost_equal_compares_across_devices_within_delta_or_places(case):
    a = torch.linspace(0, 1, 64)
    case.assertAlmostEqual(a, a.npu())
    case.assertAlmostEqual(a.half(), a.npu(), delta=1e-3)  # dtypes and devices differ: compared as torch_npu does
    case.assertAlmostEqual(a.npu(), a + 4e-3, places=2)
    with pytest.raises(AssertionError):
        case.assertAlmostEqual(a, a.npu() + 2e-5)  # beyond the class precision (1e-5)
    with pytest.raises(AssertionError, match="the reason"):
        case.assertAlmostEqual(a.npu(), a + 1e-3, places=4, msg="the reason")
    with pytest.raises(TypeError):
        case.assertAlmostEqual(a, a, places=2, delta=0.1)
    case.assertAlmostEqual(torch.tensor([True, False]), torch.tensor([True, False]).npu())


def test_input_makers_give_the_same_values_on_both_devices():
    cpu, npu = create_common_tensor([np.float16, 2, (3, 4)], -2, 2)
    assert (cpu.dtype, npu.device.type, tuple(npu.shape)) == (torch.float16, "npu", (3, 4))
    assert torch.equal(cpu, npu.cpu()) and cpu.min() >= -2 and cpu.max() < 2
    cpu, npu = create_dtype_tensor((50,), torch.int32, min_value=-3, max_value=3, no_zero=True)
    assert cpu.dtype == torch.int32 and torch.equal(cpu, npu.cpu()) and not (cpu == 0).any()
    cpu, npu = create_dtype_tensor((8,), torch.bool)
    assert cpu.dtype == torch.bool and torch.equal(cpu, npu.cpu())


def test_instantiate_tests_names_and_feeds_each_combination():
    seen = []

    @instantiate_tests
    class Generated(TestCase):
        @Dtypes(torch.float, torch.half)
        @Formats(0, 2)
        def test_op(self, device, dtype, npu_format):
            seen.append((device, dtype, npu_format))

    names = sorted(n for n in vars(Generated) if n.startswith("test_"))
    assert names == ["test_op_float16_0", "test_op_float16_2", "test_op_float32_0", "test_op_float32_2"]
    result = unittest.TextTestRunner(stream=open("/dev/null", "w")).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(Generated))
    assert result.wasSuccessful() and result.testsRun == 4
    assert sorted(seen, key=str) == sorted([("npu", d, f) for d in (torch.float, torch.half) for f in (0, 2)], key=str)
    with pytest.raises(TypeError):
        Dtypes("float32")


def test_supported_devices_skips_other_chips():
    ran = []

    class Chips(TestCase):
        @SupportedDevices(["Ascend910B"])
        def test_on_ascend(self):
            ran.append("ascend")

        @SupportedDevices(["Ascend310P"])
        def test_on_310p(self):
            ran.append("310p")

    result = unittest.TextTestRunner(stream=open("/dev/null", "w")).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(Chips))
    assert ran == ["ascend"] and len(result.skipped) == 1  # the default chip is Ascend910B3


@pytest.mark.parametrize("ci", [False, True], ids=["local", "under-CI"])
def test_a_torch_npu_style_file_runs_as_a_script_without_initializing_npu_at_import(tmp_path, ci):
    r = run_python("import torch, torch_npu.testing.testcase, torch_npu.utils, torch_npu.npu.utils\n"
                   "print(torch.npu.is_initialized())")
    assert r.lines == ["False"]
    import subprocess

    # With $CI set, PyTorch's run_tests writes a JUnit XML report (through xmlrunner) into test-reports/ of the
    # working directory: a user's CI does that too.
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": "1"} if ci else {})
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "test_npu_style.py")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if ci:
        assert list((tmp_path / "test-reports").rglob("*.xml")), proc.stderr[-3000:]
    else:
        assert "OK" in proc.stderr, proc.stderr[-3000:]


def test_seed_and_device_variables():
    code = """
        import torch, torch_npu
        from torch_npu.testing.testcase import TestCase
        class T(TestCase):
            def runTest(self):
                print(self.npu_device, torch.npu.current_device(), torch.randint(0, 10**9, (1,)).item())
        T.setUpClass(); t = T(); t.setUp(); t.runTest()
        """
    a = run_python(code, env={"SEED": "5", "SET_NPU_DEVICE": "1"})
    b = run_python(code, env={"SEED": "5", "SET_NPU_DEVICE": "1"})
    c = run_python(code, env={"SEED": "6"})
    assert a.lines == b.lines and a.lines[0].startswith("npu:1 1 ")
    assert c.lines[0].startswith("npu:0 0 ") and c.lines[0].split()[2] != a.lines[0].split()[2]
    bad = run_python(code, env={"SET_NPU_DEVICE": "one"}, check=False)
    assert bad.returncode != 0 and "SET_NPU_DEVICE='one'" in bad.stderr


def test_combined_tensors_are_views_of_one_buffer():
    import torch_npu

    tensors = [torch.full((2, 3), 1.0, device="npu"), torch.full((4,), 2.0, device="npu")]
    combined = torch_npu.utils.npu_combine_tensors(tensors)
    assert combined.shape == (10,) and torch_npu.utils.is_combined_tensor_valid(combined, tensors)
    combined.mul_(3)  # one op updates every member
    assert tensors[0].cpu().eq(3).all() and tensors[1].cpu().eq(6).all() and tensors[0].shape == (2, 3)
    assert torch.equal(torch_npu.utils.get_part_combined_tensor(combined, 6, 4).cpu(), torch.full((4,), 6.0))
    assert not torch_npu.utils.is_combined_tensor_valid(combined, [tensors[0].clone(), tensors[1]])
    assert not torch_npu.utils.is_combined_tensor_valid(combined, tensors + [None])


def test_save_async_takes_the_state_at_the_call(tmp_path):
    import torch_npu

    t = torch.arange(4.0, device="npu")
    writer = torch_npu.utils.save_async({"t": t}, tmp_path / "x.pt")
    t.add_(100)  # after the call: not in the file
    writer.join()
    loaded = torch.load(tmp_path / "x.pt")["t"]
    assert loaded.device == t.device  # torch.save's file: npu tensors keep their location
    assert torch.equal(loaded.cpu(), torch.arange(4.0))
    # torch_npu's save_async saves the object itself; `model` only orders its next backward after the copies.
    model = torch.nn.Linear(2, 2).npu()
    torch_npu.utils.save_async(model, tmp_path / "m.pt", model=model).join()
    assert torch.load(tmp_path / "m.pt", weights_only=False).state_dict().keys() == model.state_dict().keys()
    with pytest.raises(RuntimeError, match="_use_new_zipfile_serialization"):
        torch_npu.utils.save_async(t, tmp_path / "y.pt", _use_new_zipfile_serialization=False)


def test_test_case_leaves_sparse_invariant_checks_as_they_were():
    # torch_npu's TestCase does not turn PyTorch's sparse invariant checks on (its tests build tensors they refuse).
    class Sparse(TestCase):
        def runTest(self):
            self.enabled = torch.sparse.check_sparse_tensor_invariants.is_enabled()

    for before in (False, True):
        probe = Sparse()
        if before:
            torch.sparse.check_sparse_tensor_invariants.enable()
        try:
            result = unittest.TestResult()
            probe.run(result)
            assert result.wasSuccessful(), result.errors + result.failures
            assert probe.enabled is before
            assert torch.sparse.check_sparse_tensor_invariants.is_enabled() is before  # restored by tearDown
        finally:
            torch.sparse.check_sparse_tensor_invariants.disable()
