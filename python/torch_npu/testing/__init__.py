"""torch_npu.testing: softnpu.testing under torch_npu's name (the same module objects, submodules included)."""

import sys

from softnpu import testing

for _name in ("common_distributed", "common_utils", "decorator", "testcase"):
    sys.modules[f"{__name__}.{_name}"] = getattr(testing, _name)
sys.modules[__name__] = testing
del _name
