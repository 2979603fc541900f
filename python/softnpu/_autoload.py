"""The ``torch.backends`` entry point: ``import torch`` alone registers the npu device.

A module of its own, so the entry point also works while softnpu itself is importing torch (``import softnpu``
first): then this import finds softnpu partly initialized, and softnpu completes the registration itself.
"""


def register() -> None:
    import softnpu  # noqa: F401  (importing softnpu registers the device)
