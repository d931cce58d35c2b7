"""Issue 19 on CPU: timed calls rotate through input sets from unpredictable seeds on the same
staging buffers, a random sample of their outputs (chosen after each call returns) is checked
against the reference, and outputs that are not plain tensors are refused there too. The clock is
a CPU stand-in for CUDA events (the only double: everything else is the worker's code)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kevin_agent.evaluate.worker.correctness import (
    CorrectnessHarness,
    Fp64Reference,
    RefusedOutput,
    check_outputs,
    keep_output,
    refill_inputs,
)
from kevin_agent.evaluate.worker.timing import Clock, Rotation, Timer, lead_in_ms, wall_clock


def cpu_clock() -> Clock:
    return wall_clock()


class Product(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def sets(count: int = 3, seed: int = 0) -> list[tuple[Any, ...]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(32, 16, generator=gen), torch.randn(16, 8, generator=gen)) for _ in range(count)]


def rotation(pool, draw=lambda: 0.999, limit: int = 3) -> Rotation:
    return Rotation(pool, tuple(t.clone() for t in pool[0]), refill_inputs, keep_output, draw, limit=limit)


def harness() -> CorrectnessHarness:
    reference = Product()
    return CorrectnessHarness(reference=reference, candidate=None, get_inputs=list, device="cpu",  # type: ignore[arg-type]
                              seed_all=lambda seed: None, synchronize=lambda: None, poison=lambda: 0,
                              reference64=Fp64Reference(reference))


def timed_problems(candidate, rot: Rotation, trials: int = 9) -> list[str]:
    Timer(cpu_clock(), lambda: None).time(candidate, rot, trials, warmup=0)
    problems: list[str] = []
    for index, got in rot.kept:
        problems += check_outputs(harness(), rot.pool[index], got, f"a timed call, input set {index + 1}")
    return problems


def test_an_honest_candidate_passes_and_every_call_sees_the_same_buffers():
    seen: list[int] = []

    def honest(a, b):
        seen.append(a.data_ptr())
        return a @ b

    rot = rotation(sets())
    assert timed_problems(honest, rot) == []
    assert len(set(seen)) == 1 and [i for i, _ in rot.kept] == [0, 1, 2]  # sets rotate, buffers stay


class RemembersByAddress(torch.nn.Module):
    """State kept across calls: an output cached by its input's address (the timed calls used to
    reuse one input snapshot, so the cache always hit with the right answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[int, Any] = {}

    def forward(self, a, b):
        key = a.data_ptr()
        if key not in self.cache:
            self.cache[key] = a @ b
        return self.cache[key]


class RightOnlyAtFirst(torch.nn.Module):
    """Tells checked calls from timed ones by counting: right for the first calls, then zeros."""

    def __init__(self, honest_calls: int) -> None:
        super().__init__()
        self.calls, self.honest_calls = 0, honest_calls

    def forward(self, a, b):
        self.calls += 1
        return a @ b if self.calls <= self.honest_calls else torch.zeros(a.shape[0], b.shape[1])


@pytest.mark.parametrize("attack", [RemembersByAddress(), RightOnlyAtFirst(2)], ids=["by-address", "counting"])
def test_state_kept_across_calls_is_caught_on_a_sampled_timed_call(attack):
    problems = timed_problems(attack, rotation(sets()))
    assert problems and "timed call, input set" in problems[0], problems


def test_the_sample_is_drawn_after_each_call_returns():
    order: list[str] = []

    def candidate(a, b):
        order.append("call")
        return a @ b

    def draw() -> float:
        order.append("draw")
        return 0.999  # past the first `limit` calls: never replaces one

    rot = rotation(sets(), draw=draw, limit=2)
    Timer(cpu_clock(), lambda: None).time(candidate, rot, 4, warmup=1)
    assert order == ["call", "draw"] * 5 and [i for i, _ in rot.kept] == [0, 1]


def test_the_sample_is_uniform_over_all_calls_not_the_first_ones():
    """Reservoir sampling: late calls are as likely to be checked as early ones (a cheat that
    starts after the first few calls is not safe)."""
    import random

    rng = random.Random(5)
    late = 0
    for _ in range(400):
        rot = Rotation([(torch.zeros(1),)], (torch.zeros(1),), refill_inputs, lambda out: out, rng.random, limit=4)
        for _ in range(40):
            index, _args = rot.next_args()
            rot.returned(index, rot.calls)  # the "output" is the call's number
        late += sum(1 for _, call in rot.kept if call > 20)
    assert 0.4 < late / (400 * 4) < 0.6  # 20 of 40 calls are late: about half the sample


def test_at_most_the_limit_is_kept_and_kept_outputs_are_private_copies():
    held: list[Any] = []

    def aliasing(a, b):  # returns the same buffer every call, overwritten each time
        if not held:
            held.append(torch.empty(32, 8))
        return torch.matmul(a, b, out=held[0])

    rot = rotation(sets(), limit=2)
    assert timed_problems(aliasing, rot) == []  # each kept copy holds its own call's result
    assert len(rot.kept) == 2


def test_a_timed_call_returning_a_subclass_is_refused():
    class Sub(torch.Tensor):
        pass

    rot = rotation(sets())
    with pytest.raises(RefusedOutput, match="tensor subclass"):
        Timer(cpu_clock(), lambda: None).time(lambda a, b: (a @ b).as_subclass(Sub), rot, 3, warmup=0)


def test_refill_keeps_python_values_and_copies_tensors_in_place():
    staging = (torch.zeros(3), 5)
    args = refill_inputs(staging, (torch.ones(3), 7))
    assert args[0] is staging[0] and torch.equal(staging[0], torch.ones(3)) and args[1] == 7


def test_timing_pools_come_from_unpredictable_seeds(tmp_path):
    """Two workers with the same settings time on different inputs (os.urandom seeds)."""
    from kevin_agent.data import VerdictDetails
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.worker import guards
    from kevin_agent.evaluate.worker.context import Context
    from kevin_agent.evaluate.worker.stages import timing_rotation

    class Task:
        @staticmethod
        def get_inputs():
            return [torch.randn(4, 4), torch.randn(4, 4)]

    captured = guards.capture_references(paths=("torch.manual_seed", "torch.cuda.manual_seed"), classes=(),
                                         own_modules=())
    ctx = Context(captured, cpu_clock(), "cpu", EvalSettings(seed=42), VerdictDetails(), tmp_path / "c.py")
    first, second = timing_rotation(ctx, Task()), timing_rotation(ctx, Task())
    firsts = [s[0] for s in first.pool] + [s[0] for s in second.pool]
    assert len(first.pool) >= 2
    assert all(not torch.equal(x, y) for i, x in enumerate(firsts) for y in firsts[i + 1:])
    assert len(first.seeds) == len(first.pool) and len(set(first.seeds + second.seeds)) == 2 * len(first.pool)
    torch.manual_seed(first.seeds[1])  # the judge makes a set again from its seed alone
    assert torch.equal(Task.get_inputs()[0], first.pool[1][0])


def test_sampled_timed_outputs_go_to_the_witness_with_their_sets_seeds(tmp_path):
    """Issue 19: each kept timed output reaches the judge with the seed of the input set it ran on."""
    from kevin_agent.data import VerdictDetails
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.judge_wire import WitnessWriter, read_witness
    from kevin_agent.evaluate.worker import guards
    from kevin_agent.evaluate.worker.context import Context
    from kevin_agent.evaluate.worker.stages import _timed_problems

    captured = guards.capture_references(paths=("torch.manual_seed", "torch.cuda.manual_seed"), classes=(),
                                         own_modules=())
    ctx = Context(captured, cpu_clock(), "cpu", EvalSettings(seed=42), VerdictDetails(), tmp_path / "c.py")
    ctx.witness = WitnessWriter(tmp_path / "witness")
    rot = rotation(sets())
    rot.seeds = [101, 202, 303]
    rot.kept = [(2, Product()(*rot.pool[2])), (0, Product()(*rot.pool[0]))]
    assert _timed_problems(ctx, Product(), rot) == []
    calls = list(read_witness(tmp_path / "witness"))
    assert [(c.seed, c.label) for c in calls] == [(303, "a timed call, input set 3"),
                                                  (101, "a timed call, input set 1")]
    assert torch.equal(calls[0].leaves[0], Product()(*rot.pool[2]))


def test_the_device_is_settled_before_each_refill_and_each_kept_copy():
    """Work a call left on another stream (the side_stream adversary) must neither read inputs
    half-refilled for the next call nor be copied unfinished: the escape check judges it."""
    order: list[str] = []
    rot = Rotation(sets(), tuple(t.clone() for t in sets()[0]), refill_inputs, keep_output, lambda: 0.999, limit=1,
                   settle=lambda: order.append("settle"))
    def candidate(a, b):
        order.append("call")
        return a @ b

    Timer(cpu_clock(), lambda: None).time(candidate, rot, 2, warmup=0)
    assert order == ["settle", "call", "settle", "settle", "call"]  # refill, call, keep; refill, call


def test_lead_in_is_twice_the_median_issue_time_within_bounds():
    assert lead_in_ms([]) == pytest.approx(0.2)
    assert lead_in_ms([0.1, 0.3, 0.2]) == pytest.approx(0.4)
    assert lead_in_ms([0.001]) == pytest.approx(0.05)  # a floor for launch jitter
    assert lead_in_ms([5.0, 7.0]) == pytest.approx(2.0)  # a call that synchronizes inside: capped


class FakeClock:
    """A host clock whose ticks are scripted, recording the order of holds, records and calls."""

    def __init__(self, order: list[str], issue_ms: list[float]) -> None:
        self.order, self.issue_ms, self.now = order, list(issue_ms), 0.0

    def perf_counter(self) -> float:
        return self.now

    def call(self, a, b):
        self.order.append("call")
        self.now += (self.issue_ms.pop(0) if self.issue_ms else 0.0) / 1000.0
        return a @ b

    def clock(self) -> Clock:
        base = wall_clock()
        return Clock(base.event_class, lambda e, s=None: self.order.append("start-or-end"), base.elapsed_time,
                     lambda: None, self.perf_counter, None, hold=lambda ms: self.order.append(f"hold {ms:.2f}"))


def test_every_timed_start_follows_a_hold_sized_from_the_warm_up_calls():
    """An idle device (rotation settles before each refill) must not time the host issuing the
    call: the hold queues the call's launches before the start event runs."""
    order: list[str] = []
    fake = FakeClock(order, [9.0, 0.3, 0.1, 0.2])  # the first warm-up call (a build) is left out
    timer = Timer(fake.clock(), lambda: order.append("flush"))
    timer.time(fake.call, rotation(sets()), 2, warmup=4)
    timed = order[order.index("flush"):]
    assert timed == ["flush", "hold 0.40", "start-or-end", "call", "start-or-end"] * 2
    timer.time_synced(fake.call, rotation(sets()), 1)
    assert order[-5:] == ["flush", "hold 0.40", "start-or-end", "call", "start-or-end"]
