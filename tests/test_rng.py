"""Random numbers on npu: seeding and RNG state as torch.cuda's functions promise them."""

import pytest
import torch


def _draw(device="npu"):
    # Several random ops, each consuming the device generator.
    return torch.cat([
        torch.rand(64, device=device),
        torch.randn(64, device=device),
        torch.empty(64, device=device).uniform_(-2, 2),
        torch.empty(64, device=device).normal_(1, 3),
        torch.bernoulli(torch.full((64,), 0.5, device=device)),
        torch.randint(0, 100, (64,), device=device).float(),
        torch.randperm(64, device=device).float(),
        torch.multinomial(torch.ones(64, device=device), 8).float(),
        torch.empty(64, device=device).exponential_(),
    ]).cpu()


def test_same_seed_same_values_and_fresh_values_after():
    torch.npu.manual_seed(1234)
    first = _draw()
    again = _draw()
    assert not torch.equal(first, again)  # the generator advances
    torch.npu.manual_seed(1234)
    assert torch.equal(_draw(), first)
    torch.npu.manual_seed(4321)
    assert not torch.equal(_draw(), first)


def test_torch_manual_seed_seeds_npu():
    torch.manual_seed(7)
    a = _draw()
    torch.manual_seed(7)
    assert torch.equal(_draw(), a)
    assert torch.npu.initial_seed() == 7


def test_manual_seed_is_per_device_and_manual_seed_all_seeds_every_device():
    torch.npu.manual_seed_all(11)
    on_zero = _draw("npu:0")
    on_one = _draw("npu:1")
    assert torch.equal(on_zero, on_one)  # same seed, same stream of numbers
    torch.npu.manual_seed_all(11)
    with torch.npu.device(1):
        torch.npu.manual_seed(12)  # only the current device
        assert torch.npu.initial_seed() == 12
    assert torch.npu.initial_seed() == 11
    assert torch.equal(_draw("npu:0"), on_zero)
    assert not torch.equal(_draw("npu:1"), on_one)


def test_seed_and_initial_seed():
    torch.npu.manual_seed(5)
    assert torch.npu.initial_seed() == 5
    torch.npu.seed()
    s = torch.npu.initial_seed()
    assert s != 5
    a = _draw()
    torch.npu.manual_seed(s)
    assert torch.equal(_draw(), a)  # seed() set a reproducible seed, reported by initial_seed()


def test_get_and_set_rng_state_reproduce_values():
    torch.npu.manual_seed(99)
    _draw()
    state = torch.npu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = _draw()
    torch.npu.set_rng_state(state)
    assert torch.equal(_draw(), a)
    # Restoring state is not disturbed by changing the returned tensor (set_rng_state copies it).
    state2 = torch.npu.get_rng_state("npu:0")
    b = _draw()
    torch.npu.set_rng_state(state2, "npu:0")
    state2.zero_()
    assert torch.equal(_draw(), b)


def test_get_and_set_rng_state_all():
    torch.npu.manual_seed_all(3)
    states = torch.npu.get_rng_state_all()
    assert len(states) == torch.npu.device_count()
    a0, a1 = _draw("npu:0"), _draw("npu:1")
    torch.npu.set_rng_state_all(states)
    assert torch.equal(_draw("npu:0"), a0)
    assert torch.equal(_draw("npu:1"), a1)


def test_set_rng_state_is_ordered_with_queued_kernels():
    # Kernels queued before set_rng_state use the old state even if they have not run yet.
    torch.npu.manual_seed(21)
    state = torch.npu.get_rng_state()
    expected = _draw()
    torch.npu.set_rng_state(state)
    torch.npu._sleep(200_000_000)
    queued = torch.rand(64, device="npu")  # not run yet
    torch.npu.manual_seed(999)
    assert torch.equal(queued.cpu(), expected[:64])


def test_explicit_generator():
    g = torch.Generator(device="npu")
    g.manual_seed(17)
    a = torch.randn(32, device="npu", generator=g).cpu()
    g.manual_seed(17)
    b = torch.randn(32, device="npu", generator=g).cpu()
    assert torch.equal(a, b)
    torch.npu.manual_seed(17)  # the default generator is a different one
    torch.randn(32, device="npu", generator=g)
    g.manual_seed(17)
    assert torch.equal(torch.randn(32, device="npu", generator=g).cpu(), a)


def test_random_values_have_the_right_distribution():
    torch.npu.manual_seed(0)
    u = torch.rand(100_000, device="npu").cpu()
    n = torch.randn(100_000, device="npu").cpu()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
    perm = torch.randperm(1000, device="npu").cpu()
    assert torch.equal(perm.sort().values, torch.arange(1000))


def test_dropout_follows_the_npu_generator():
    def dropout():
        return torch.nn.functional.dropout(torch.ones(256, device="npu"), 0.5).cpu()

    torch.npu.manual_seed(8)
    a = dropout()
    torch.rand(100)  # the CPU generator is not the npu one: using it must not matter
    torch.npu.manual_seed(8)
    assert torch.equal(dropout(), a)
    state = torch.npu.get_rng_state()
    b = dropout()
    torch.manual_seed(0)
    torch.npu.set_rng_state(state)
    assert torch.equal(dropout(), b)


def test_seed_all_and_default_generators():
    torch.npu.seed_all()
    seeds = [torch.npu.default_generators[i].initial_seed() for i in range(torch.npu.device_count())]
    assert len(set(seeds)) == 1  # one random seed for every device
    assert torch.npu.initial_seed() == seeds[0]
    assert [g.device for g in torch.npu.default_generators] == [torch.device("npu", i) for i in range(len(seeds))]
    # The default generator is the one random ops use.
    torch.npu.default_generators[0].manual_seed(31)
    a = _draw()
    torch.npu.manual_seed(31)
    assert torch.equal(_draw(), a)
