"""torch_npu.contrib.transfer_to_npu: softnpu.contrib.transfer_to_npu under torch_npu's name.

Both names are the same module object, so importing either patches torch once.
"""

import sys

from softnpu.contrib import transfer_to_npu

sys.modules[__name__] = transfer_to_npu
