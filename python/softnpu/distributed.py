"""torch.distributed on npu: the ``hccl`` backend, under torch_npu's name.

Importing softnpu (which ``import torch`` does) registers it for the ``npu`` device type, so
``init_process_group("hccl")``, ``init_process_group("cpu:gloo,npu:hccl")`` and, with npu as the accelerator,
``init_process_group()`` (torch picks ``Backend.default_device_backend_map["npu"]``) run collectives on npu tensors,
DistributedDataParallel included. The backend carries them over Gloo through pinned host buffers, with HCCL's stream
semantics (see csrc/backend/c10d/process_group_hccl.h).

``dist.monitored_barrier`` works in groups with hccl too: torch allows it in Gloo groups only, and hccl has Gloo's.

HCCL's timeouts hold as on torch_npu: a group connects within HCCL_CONNECT_TIMEOUT (default 120 s) and each collective
completes within HCCL_EXEC_TIMEOUT (default 1836 s), or raises (a peer that died or stopped answering), each bounded
by the group's own timeout. Such failures are HCCL's EI0002 (error code 507048), a dead peer's with HCCL's
"Heartbeat Lost Occurred" report; torch.npu._fault's hccl_timeout and dead_peer cause them on demand.

``torch.distributed.distributed_c10d._abort_process_group`` (the backend's ``abort()``) and torch_npu's
``abort_hccl_comm(reason)`` fail the group's pending collectives at once; ``destroy_process_group`` (``shutdown()``)
lets them finish first. Then a new group can be created in the same process, on a store of its own (torch_npu's
reinit path), and torchrun's restarts find their peers (``_attempt_store``).
"""

import copy
import datetime
import functools
import os

import torch
import torch.distributed as dist

from ._c10d import ProcessGroupHCCL

__all__ = ["ProcessGroupHCCL", "is_hccl_available", "monitored_barrier"]


def is_hccl_available() -> bool:
    """Whether the ``hccl`` backend can be used: always, as it needs nothing beyond Gloo."""
    return True


def _create_hccl(backend_opts, options):
    """The creator torch calls for each new hccl group, with the group's ``pg_options`` (torch_npu's
    ProcessGroupHCCL.Options, kept by the group as its ``options``) or None."""
    if options is None:
        options = ProcessGroupHCCL.Options()
    elif not isinstance(options, ProcessGroupHCCL.Options):
        raise TypeError(f"pg_options of an hccl group must be a ProcessGroupHCCL.Options, got {type(options).__name__}")
    else:
        options = copy.copy(options)
    options.global_ranks_in_group = list(backend_opts.global_ranks_in_group)
    options.group_id = backend_opts.group_id
    options._timeout = min(backend_opts.timeout, _hccl_timeout("HCCL_CONNECT_TIMEOUT", 120))
    group = ProcessGroupHCCL(_attempt_store(backend_opts.store), backend_opts.group_rank, backend_opts.group_size,
                             options)
    group.set_timeout(min(backend_opts.timeout, _hccl_timeout("HCCL_EXEC_TIMEOUT", 1836)))
    return group


def _attempt_store(store):
    """The group's store, scoped to this attempt of torchrun's workers when they share its agent's store.

    torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True) keeps one TCPStore for all attempts of its workers, and
    torch's env:// rendezvous no longer scopes keys by attempt (it expects a new store each round; torch 2.13's
    dynamic rendezvous keeps the first one): the addresses the group's ranks publish to connect stay from one attempt
    to the next, and a restarted rank that reads a peer's before the peer's new process has replaced it connects to
    the dead worker's address and fails (pytorch/pytorch#135712). torch_npu's own rendezvous scopes its store by
    TORCHELASTIC_RESTART_COUNT; so does the hccl group here. (The count is the agent's own: one agent's workers agree
    on it, which is what a single host runs.)"""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return store
    return dist.PrefixStore(f"/worker/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/hccl", store)


def _check_environment() -> None:
    """Raises for a malformed HCCL_CONNECT_TIMEOUT / HCCL_EXEC_TIMEOUT when torch.npu initializes, as the other
    variables do, rather than at the first group."""
    _hccl_timeout("HCCL_CONNECT_TIMEOUT", 120)
    _hccl_timeout("HCCL_EXEC_TIMEOUT", 1836)


def _hccl_timeout(name: str, default: int) -> datetime.timedelta:
    """HCCL_CONNECT_TIMEOUT / HCCL_EXEC_TIMEOUT (csrc/common/env_vars.def): whole seconds, as HCCL reads them."""
    text = os.environ.get(name, "").strip()
    if not text:
        return datetime.timedelta(seconds=default)
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"{name}='{text}' is not valid: expected a positive whole number of seconds.")
    return datetime.timedelta(seconds=int(text))


dist.Backend.register_backend("hccl", _create_hccl, extended_api=True, devices=["npu"])
# torch_npu adds it next to torch.distributed.is_nccl_available and is_gloo_available.
dist.is_hccl_available = is_hccl_available


def _hccl_of(group):
    """The group's hccl backend, or None."""
    try:
        backend = group._get_backend(torch.device("npu"))
    except RuntimeError:  # no backend for npu in this group
        return None
    return backend if isinstance(backend, ProcessGroupHCCL) else None


_torch_monitored_barrier = dist.monitored_barrier


@functools.wraps(_torch_monitored_barrier)
def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    c10d = dist.distributed_c10d
    if c10d._rank_not_in_group(group):
        return _torch_monitored_barrier(group, timeout, wait_all_ranks)
    hccl = _hccl_of(c10d._get_default_group() if group is None else group)
    if hccl is None:
        return _torch_monitored_barrier(group, timeout, wait_all_ranks)
    if timeout is None:  # the group's timeout, as Gloo's default
        return hccl.monitored_barrier(wait_all_ranks=wait_all_ranks)
    if isinstance(timeout, (int, float)):
        timeout = datetime.timedelta(seconds=timeout)
    return hccl.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


dist.monitored_barrier = monitored_barrier
dist.distributed_c10d.monitored_barrier = monitored_barrier
