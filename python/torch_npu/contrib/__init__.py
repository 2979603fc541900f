"""torch_npu.contrib: softnpu.contrib under torch_npu's name (``transfer_to_npu`` is imported by name only)."""
