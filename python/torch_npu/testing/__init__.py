"""torch_npu.testing: how torch_npu users write their own tests, built on PyTorch's torch.testing.

`testcase` (TestCase with torch_npu's assertions, run_tests), `common_utils` (create_common_tensor and the other
input makers, the device under test), `decorator` (Dtypes / Formats / instantiate_tests) and `common_distributed`
(skipIfUnsupportMultiNPU). Importing any of them does not initialize npu, as torch_npu promises (test_distributed
relies on it). Each module's `__all__` names torch_npu's public helpers; what it imports for itself is not public.
"""

from . import common_distributed, common_utils, decorator, testcase  # noqa: F401
