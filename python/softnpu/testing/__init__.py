"""torch_npu.testing: how torch_npu users write their own tests, built on PyTorch's torch.testing.

`testcase` (TestCase with torch_npu's assertions, run_tests), `common_utils` (create_common_tensor and the other
input makers, the device under test) and `decorator` (Dtypes / Formats / instantiate_tests). Importing any of them
does not initialize npu, as torch_npu promises (test_distributed relies on it).
"""

from . import common_distributed, common_utils, decorator, testcase  # noqa: F401
