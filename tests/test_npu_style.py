"""Ops against the CPU, written the way torch_npu users write their tests (torch_npu.testing), so that module is
exercised as they exercise it. Runs under pytest and as a script (`python tests/test_npu_style.py`, run_tests)."""

import numpy as np
import torch

import torch_npu
from torch_npu.testing.common_utils import create_common_tensor, create_dtype_tensor
from torch_npu.testing.decorator import Dtypes, Formats, instantiate_tests
from torch_npu.testing.testcase import TestCase, run_tests


class TestElementwise(TestCase):
    def cpu_op_exec(self, a, b):
        return torch.addcmul(a, a, b, value=0.5).numpy()

    def npu_op_exec(self, a, b):
        return torch.addcmul(a, a, b, value=0.5).cpu().numpy()

    def test_addcmul(self):
        for item in [[np.float32, 0, (4, 3)], [np.float32, 2, (2, 3, 5)], [np.float16, -1, (64,)]]:
            cpu_a, npu_a = create_common_tensor(item, -10, 10)
            cpu_b, npu_b = create_common_tensor(item, -10, 10)
            if item[0] == np.float16:  # the CPU reference in float32, as torch_npu's tests do for half
                expected = self.cpu_op_exec(cpu_a.float(), cpu_b.float()).astype(np.float16)
            else:
                expected = self.cpu_op_exec(cpu_a, cpu_b)
            self.assertRtolEqual(expected, self.npu_op_exec(npu_a, npu_b))

    def test_to_and_back(self):
        for item in [[np.float32, 0, [3, 3]], [np.float16, 0, [4, 3]], [np.int32, 0, [3, 5]]]:
            cpu_input, npu_input = create_common_tensor(item, -100, 100)
            for target in [torch.float16, torch.float32, torch.int32, "cpu", "npu"]:
                self.assertRtolEqual(cpu_input.to(target).cpu().numpy(), npu_input.to(target).cpu().numpy())


@instantiate_tests
class TestReductions(TestCase):
    @Dtypes(torch.float, torch.half)
    @Formats(0, 2)
    def test_sum_and_max(self, device, dtype, npu_format):
        cpu_input, npu_input = create_dtype_tensor((6, 7), dtype, npu_format)
        self.assertEqual(npu_input.device.type, device)
        self.assertEqual(torch_npu.get_npu_format(npu_input), npu_format)
        reference = cpu_input.float()
        self.assertRtolEqual(reference.sum(1).to(dtype), npu_input.sum(1), prec16=1e-2)
        self.assertEqual(reference.max(), npu_input.max(), 0)

    @Dtypes(torch.int32)
    def test_integer_division(self, device, dtype):
        cpu_a, npu_a = create_dtype_tensor((5, 5), dtype, min_value=-50, max_value=50)
        cpu_b, npu_b = create_dtype_tensor((5, 5), dtype, min_value=-5, max_value=5, no_zero=True)
        self.assertRtolEqual(torch.div(cpu_a, cpu_b, rounding_mode="floor"),
                             torch.div(npu_a, npu_b, rounding_mode="floor"))


class TestTraining(TestCase):
    def test_linear_gradients(self):
        cpu_x, npu_x = create_common_tensor([np.float32, 0, (8, 16)], -1, 1)
        cpu_model = torch.nn.Linear(16, 4)
        npu_model = torch.nn.Linear(16, 4).npu()
        npu_model.load_state_dict(cpu_model.state_dict())
        cpu_model(cpu_x).square().sum().backward()
        npu_model(npu_x).square().sum().backward()
        self.assertRtolEqual(cpu_model.weight.grad, npu_model.weight.grad)
        self.assertEqual(cpu_model.bias.grad, npu_model.bias.grad, 1e-5)


if __name__ == "__main__":
    run_tests()
