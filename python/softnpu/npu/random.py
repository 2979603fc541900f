"""Random number generators of npu devices (torch.cuda's RNG functions, for npu)."""

from typing import Any, Iterable

import torch

from .. import _C
from .device import _device_index, _is_in_bad_fork, _lazy_init, device_count


def _generators() -> tuple:
    global default_generators
    if not default_generators:
        _lazy_init()
        default_generators = tuple(_C._default_generator(i) for i in range(device_count()))
    return default_generators


# Filled on first use (torch.npu.default_generators, as torch.cuda.default_generators).
default_generators: tuple = ()


def _generator(device: Any) -> torch.Generator:
    return _generators()[_device_index(device, optional=True)]


def _get_generator(device: torch.device) -> torch.Generator:
    """The default generator of an npu device (its index, else the current device's), as torch.cuda._get_generator."""
    return _generator(device.index)


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    seed = int(seed)
    _generator(None).manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seeds every device's generator (torch.manual_seed calls this too)."""
    if _is_in_bad_fork():
        return
    seed = int(seed)
    for g in _generators():
        g.manual_seed(seed)


def seed() -> None:
    """Seeds the current device's generator with a random number."""
    _generator(None).seed()


def seed_all() -> None:
    gens = _generators()
    s = gens[0].seed() if gens else 0
    for g in gens[1:]:
        g.manual_seed(s)


def initial_seed() -> int:
    return _generator(None).initial_seed()


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    """The generator state of a device as a ByteTensor (seed and offset)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    _generator(device).set_state(new_state.clone())


def get_rng_state_all() -> list:
    return [g.get_state() for g in _generators()]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
