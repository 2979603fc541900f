"""Sync points: ops whose outputs depend on data (nonzero, unique, masked_select, ...) wait for the device."""

from .. import _C


def sync_points() -> dict:
    """{"total": N, "by_op": {op name: count}} of the host fallbacks taken so far in this process."""
    total, by_op = _C._sync_points()
    return {"total": total, "by_op": dict(by_op)}
