"""torch_npu.utils._dynamo: registering npu with Dynamo (its device interface for npu and each npu:N), which softnpu
also does when it loads; importing this module does not import Dynamo."""

from . import register_device_interface as _dynamo_register_interface_for_device  # noqa: F401
