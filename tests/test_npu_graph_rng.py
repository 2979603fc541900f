"""NPU graphs' graph-safe RNG (CUDA's model, which torch_npu copies) and fork/join across streams in a capture: a
captured random op draws what eager draws at the same seed and offset, each replay advances the generator by the
graph's offsets, the RNG state read or set during capture is the graph's, the seed cannot change during capture;
streams that wait on the capturing stream join the capture and their work replays with it."""

import pytest
import torch
import torch.nn.functional as F


def capture(fn, stream=None):
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g, stream=stream):
        out = fn()
    return g, out


@pytest.mark.parametrize("op", ["uniform", "normal", "dropout", "multinomial"])
def test_a_replay_draws_what_eager_draws_at_the_same_seed(op):
    x = torch.ones(512, device="npu")
    w = torch.tensor([1.0, 2.0, 3.0, 4.0], device="npu")
    fn = {
        "uniform": lambda: torch.empty(512, device="npu").uniform_(-1, 1),
        "normal": lambda: torch.empty(512, device="npu").normal_(),
        "dropout": lambda: F.dropout(x, p=0.5),
        "multinomial": lambda: torch.multinomial(w, 64, replacement=True),
    }[op]
    torch.npu.manual_seed(7)
    eager = [fn().cpu() for _ in range(3)]
    g, out = capture(fn)
    torch.npu.manual_seed(7)
    for expected in eager:  # each replay advances the offset as one eager call does
        g.replay()
        assert torch.equal(out.cpu(), expected)
    assert not torch.equal(eager[0], eager[1])


def test_replays_advance_the_generator_by_the_graphs_offsets():
    torch.npu.manual_seed(3)
    g, out = capture(lambda: torch.rand(8, device="npu") + torch.rand(8, device="npu"))
    torch.npu.manual_seed(3)
    offset = torch.npu.get_rng_state()[8:].view(torch.int64).item()
    g.replay()
    after = torch.npu.get_rng_state()[8:].view(torch.int64).item()
    assert after - offset == 8  # two kernels, 4 each (offsets are multiples of 4, as torch_npu's and CUDA's)
    torch.npu.manual_seed(3)
    a, b = torch.rand(8, device="npu"), torch.rand(8, device="npu")
    assert torch.equal(out.cpu(), (a + b).cpu())
    assert torch.npu.get_rng_state()[8:].view(torch.int64).item() == after


def test_rng_state_during_capture_is_the_graphs():
    torch.npu.manual_seed(11)
    eager_pre = torch.rand(4, device="npu").cpu()
    eager_first = torch.rand(4, device="npu").cpu()

    def body():
        pre = torch.rand(4, device="npu")
        state = torch.npu.get_rng_state()
        first = torch.rand(4, device="npu")
        torch.npu.set_rng_state(state)  # rewinds the offset within the graph
        second = torch.rand(4, device="npu")
        return pre, first, second

    g, (pre, first, second) = capture(body)
    torch.npu.manual_seed(11)
    g.replay()
    assert torch.equal(pre.cpu(), eager_pre)
    assert torch.equal(first.cpu(), eager_first)
    assert torch.equal(second.cpu(), eager_first)


def test_the_seed_cannot_change_during_capture():
    torch.npu.manual_seed(0)
    g = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match="set_current_seed can be called during stream capture only if new seed "
                                           "is the same as the original seed"):
        with torch.npu.graph(g):
            torch.npu.manual_seed(1)
    with torch.npu.graph(torch.npu.NPUGraph()):
        torch.npu.manual_seed(0)  # the same seed is accepted
        with pytest.raises(RuntimeError, match="get_offset while in capture mode during NPU graph capture"):
            torch.npu.default_generators[0].get_offset()


def test_a_registered_generator_replays_its_own_offsets():
    gen = torch.Generator(device="npu")
    gen.manual_seed(5)
    g = torch.npu.NPUGraph()
    g.register_generator_state(gen)
    with torch.npu.graph(g):
        out = torch.rand(8, device="npu", generator=gen)
    ref = torch.Generator(device="npu")
    ref.manual_seed(5)
    expected = [torch.rand(8, device="npu", generator=ref).cpu() for _ in range(2)]
    gen.manual_seed(5)
    default_state = torch.npu.get_rng_state()
    for e in expected:
        g.replay()
        assert torch.equal(out.cpu(), e)
    assert torch.equal(torch.npu.get_rng_state(), default_state)  # the default generator was not drawn from


def test_graphsafe_state_switches_what_the_generator_draws_from():
    gen = torch.Generator(device="npu")
    gen.manual_seed(9)
    other = gen.clone_state()  # a copy: seed 9, offset 0
    torch.rand(4, device="npu", generator=gen)
    saved = gen.graphsafe_get_state()
    gen.graphsafe_set_state(other)
    ref = torch.Generator(device="npu")
    ref.manual_seed(9)
    assert torch.equal(torch.rand(4, device="npu", generator=gen).cpu(),
                       torch.rand(4, device="npu", generator=ref).cpu())
    gen.graphsafe_set_state(saved)
    assert gen.get_state()[8:].view(torch.int64).item() == 4


def test_two_graphs_replayed_on_two_streams_take_consecutive_offsets():
    torch.npu.manual_seed(21)
    refs = [torch.randn(16, device="npu").cpu() for _ in range(2)]
    torch.npu.manual_seed(21)
    (g0, out0), (g1, out1) = capture(lambda: torch.randn(16, device="npu")), capture(
        lambda: torch.randn(16, device="npu"))
    s0, s1 = torch.npu.Stream(), torch.npu.Stream()
    with torch.npu.stream(s0):
        g0.replay()
    with torch.npu.stream(s1):
        g1.replay()
    torch.npu.synchronize()
    assert torch.equal(out0.cpu(), refs[0]) and torch.equal(out1.cpu(), refs[1])


def test_a_side_stream_joins_the_capture_and_replays_with_it():
    x = torch.full((4, 4), 2.0, device="npu")
    side = torch.npu.Stream()
    g = torch.npu.NPUGraph()
    with torch.npu.graph(g):
        main = torch.npu.current_stream()
        a = x * 3
        side.wait_stream(main)  # fork: side joins the capture
        with torch.npu.stream(side):
            assert torch.npu.is_current_stream_capturing()
            b = x + 1  # allocated from the graph's pool
        main.wait_stream(side)  # join
        out = a + b
    assert not torch.npu.is_current_stream_capturing()
    with torch.npu.stream(side):
        assert not torch.npu.is_current_stream_capturing()  # the capture's end released it
    for value in (2.0, 5.0):
        x.fill_(value)
        g.replay()
        assert torch.equal(out.cpu(), torch.full((4, 4), value * 3 + value + 1))
    assert g._node_count() == 3


def test_only_the_stream_that_began_a_capture_ends_it():
    side = torch.npu.Stream()
    s = torch.npu.Stream()
    g = torch.npu.NPUGraph()
    with torch.npu.stream(s):
        g.capture_begin()
        side.wait_stream(s)
        with torch.npu.stream(side):
            with pytest.raises(RuntimeError, match="Capture must end on the same stream it began on"):
                g.capture_end()
        g.capture_end()
    torch.npu.current_stream().wait_stream(s)
