"""The judge's side of the observation: inputs made here, time taken here, outputs read here.

For each batch of ``k`` calls the judge makes ``k`` input sets from fresh ``os.urandom`` seeds (the
worker never sees a seed), and keeps private copies. It times the reference on them, then the
candidate: it marks the start on its own stream, copies the sets into the allocation the worker
shared for them, records the worker's "go" event, asks the worker to run the batch, waits for the
worker's "done" fence on its own stream and marks the end. Only then does it read the outputs, straight from the
worker's device memory, at positions it draws after the worker said it was done, and compares
them with its own reference run on its private copies (both gates of ``check_outputs``).

Why the time holds: the inputs exist on the device only after the start mark, and every value
the judge reads is read on its stream after the end mark, by a gather it times too. Work the
candidate left running past "done" (another stream, a late correction) either is not finished
when the gather reads (wrong values) or delays the gather, which then takes far longer than the
same gather of the judge's own memory (``late_work``: the verdict is not trusted). torch (lazily)
and the standard library only.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from kevin_agent.evaluate.observe.report import Observation, finite
from kevin_agent.evaluate.observe.transport import FENCES_BYTES, Transport, leaf_view
from kevin_agent.evaluate.observe.wire import (
    MAX_LEAVES,
    Channel,
    ChannelError,
    TensorLeaf,
    expect,
    read_leaf,
)

TARGET_BATCH_MS = 25.0  # long enough that the channel's round trip and context switches stay ~1%
MEASURED_BATCHES = 5
MAX_BATCH_CALLS = 64
MEMORY_BUDGET_BYTES = 2 << 30  # input sets and outputs of one batch, on each side
SAMPLE_ELEMENTS = 1 << 20  # a larger output leaf is read at this many positions
ALIGN = 256
MESSAGE_TIMEOUT_S = 120.0
CHECKED_CALLS_PER_BATCH = 8  # a candidate wrong on 10% of calls escapes 6 batches with p = 0.9^48 < 1%
LATE_WORK_FACTOR = 4.0  # the candidate's gather against the judge's own, same sizes
LATE_WORK_SLACK_MS = 0.5


@dataclass
class Judged:
    """What observing needs of the judge: the reference, a fresh input set, the comparison."""

    reference: Callable[..., Any]
    make_inputs: Callable[[int], list[Any]]  # a seed -> one call's arguments on the device
    check: Callable[[list[Any], list[Any], str, Callable[[int, Any], Any]], list[str]]


class _Plan:
    """Where each tensor argument of one input set lies in the shared allocation."""

    def __init__(self, sample: list[Any]) -> None:
        import torch

        self.offsets: list[Optional[int]] = []
        size = 0
        for arg in sample:
            if isinstance(arg, torch.Tensor):
                self.offsets.append(size)
                size += _aligned(arg.numel() * arg.element_size())
            elif isinstance(arg, (bool, int, float)) or arg is None:
                self.offsets.append(None)
            else:
                raise ChannelError(f"an input of type {type(arg).__name__} cannot be shared (tensors and numbers only)")
        self.set_bytes = max(ALIGN, size)


def _bytes(count: int, device: Any) -> Any:
    import torch

    return torch.empty(count, dtype=torch.uint8, device=device)


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def observe(channel: Channel, transport: Transport, judged: Judged) -> Observation:
    """Observe the worker on the other end of ``channel``; never raises (``error`` says why not)."""
    seen = Observation()
    try:
        ready = expect(channel.receive(MESSAGE_TIMEOUT_S), "ready")
        seen.inproc_ms = finite(ready.get("inproc_ms"))
        _Session(channel, transport, judged, seen).run()
        channel.send({"op": "bye"})
        if seen.kernel_ms:
            from kevin_agent.evaluate.worker.timing import stats_from_samples

            seen.kernel_stats = stats_from_samples(seen.kernel_ms)
    except ChannelError as exc:
        seen.error = str(exc)
    except Exception as exc:  # the reference or the device failed here: no observation
        seen.error = f"{type(exc).__name__}: {str(exc)[:300]}"
    return seen


class _Session:
    def __init__(self, channel: Channel, transport: Transport, judged: Judged, seen: Observation) -> None:
        self.channel, self.transport, self.judged, self.seen = channel, transport, judged, seen
        import torch

        sample = judged.make_inputs(_seed())
        self.plan = _Plan(sample)
        with torch.no_grad():
            expected = _leaves(judged.reference(*sample))
        self.out_bytes = sum(leaf.numel() * leaf.element_size() for leaf in expected if hasattr(leaf, "numel"))
        self.out_shapes = [tuple(leaf.shape) if hasattr(leaf, "shape") else None for leaf in expected]
        self.copy_outputs = False  # set when calls return the same memory (a static output buffer)
        self._shapes: list[list[Any]] = []
        per_call = self.plan.set_bytes + self.out_bytes
        self.max_calls = max(1, min(MAX_BATCH_CALLS, MEMORY_BUDGET_BYTES // max(1, per_call)))
        wanted = self.max_calls * self.plan.set_bytes
        channel.send({"op": "staging", "bytes": wanted})
        armed = expect(channel.receive(MESSAGE_TIMEOUT_S), "armed")
        self.handle = str(armed.get("staging"))
        self.staging = transport.open(self.handle)
        if self.staging.numel() < FENCES_BYTES + wanted:
            raise ChannelError(f"the worker shared {self.staging.numel()} bytes for fences and inputs, not "
                               f"{FENCES_BYTES + wanted}")
        self.go, self.done = transport.flags(self.staging, self.handle)
        # the reference reads the same layout from the judge's own memory: the candidate's process
        # can write the shared allocation at any time, so it never feeds the reference
        self.own_staging = _bytes(FENCES_BYTES + wanted, transport.device)

    def run(self) -> None:
        warm = self.batch(min(2, self.max_calls), measured=False)
        per_call = max(warm, 1e-3)
        calls = max(1, min(self.max_calls, math.ceil(TARGET_BATCH_MS / per_call)))
        self.seen.calls_per_batch = calls
        for _ in range(MEASURED_BATCHES):
            self.batch(calls, measured=True)
            if self.seen.problems or self.seen.late_work:
                return

    def batch(self, calls: int, measured: bool) -> float:
        """One reference batch and one candidate batch on ``calls`` fresh input sets; the
        candidate's milliseconds per call."""
        sets = [self.judged.make_inputs(_seed()) for _ in range(calls)]
        eager_ms = self._time_reference(sets)
        kernel_ms, outputs, positions, gather_ms, places = self._time_candidate(sets)
        if _aliased(places):
            if measured or self.copy_outputs:
                self.seen.problems.append("the outputs of different calls share memory even when copied: each call "
                                          "must return its own result (observed outside your process)")
                return kernel_ms / calls
            self.copy_outputs = True  # a static output buffer: the worker copies each call's from now on
            return kernel_ms / calls
        own_gather_ms = self._own_gather_ms(sets[0], positions[0])
        if gather_ms > LATE_WORK_FACTOR * own_gather_ms + LATE_WORK_SLACK_MS:
            self.seen.late_work = (f"reading your outputs took {gather_ms:.3f} ms after your calls said they were "
                                   f"done, against {own_gather_ms:.3f} ms for the same read of the judge's memory: "
                                   "work ran after the calls returned")
        self._check(sets, outputs, positions, self._shapes)
        if measured:
            self.seen.kernel_ms.append(kernel_ms / calls)
            self.seen.eager_ms.append(eager_ms / calls)
        return kernel_ms / calls

    def _stage(self, sets: list[list[Any]], target: Any) -> list[list[Any]]:
        """Each set copied into ``target`` (the shared allocation, or the judge's own copy of its
        layout); the views the calls take (numbers as is)."""
        staged = []
        for index, args in enumerate(sets):
            views = []
            for arg, offset in zip(args, self.plan.offsets, strict=True):
                if offset is None:
                    views.append(arg)
                    continue
                leaf = _leaf_of(arg, self.handle, FENCES_BYTES + index * self.plan.set_bytes + offset)
                view = leaf_view(target, leaf)
                view.copy_(arg)
                views.append(view)
            staged.append(views)
        return staged

    def _time_reference(self, sets: list[list[Any]]) -> float:
        import torch

        staged = self._stage(sets, self.own_staging)
        start = self.transport.mark()
        with torch.no_grad():
            for args in staged:
                self.judged.reference(*args)
        end = self.transport.mark()
        return self.transport.between(start, end)

    def _time_candidate(self, sets: list[list[Any]]) -> tuple[float, list[list[Any]], list[list[Any]], float,
                                                              list[list[Any]]]:
        """(ms for the batch, each call's outputs as read here, the positions read, ms of the read,
        where each call's output leaves lie in the worker's memory)."""
        self._stage(sets, self.staging)
        start = self.transport.mark()
        self.transport.record(self.go)
        self.channel.send({"op": "run", "copy": self.copy_outputs,
                           "calls": [self._describe_call(i, args) for i, args in enumerate(sets)]})
        done = expect(self.channel.receive(MESSAGE_TIMEOUT_S), "done")
        views, places = self._output_views(done.get("outputs"), len(sets))
        self._shapes = [[tuple(v.shape) if hasattr(v, "shape") else None for v in call] for call in views]
        positions = [[_positions(v, self.transport.device) for v in call] for call in views]
        self.transport.wait(self.done)
        end = self.transport.mark()
        read = [[_read(v, p) for v, p in zip(call, pos, strict=True)]
                for call, pos in zip(views, positions, strict=True)]
        after = self.transport.mark()
        self.seen.calls += len(sets)
        return self.transport.between(start, end), read, positions, self.transport.between(end, after), places

    def _describe_call(self, index: int, args: list[Any]) -> list[dict[str, Any]]:
        described = []
        for arg, offset in zip(args, self.plan.offsets, strict=True):
            if offset is None:
                described.append({"value": arg})
            else:
                place = FENCES_BYTES + index * self.plan.set_bytes + offset
                described.append({"tensor": _leaf_of(arg, self.handle, place).to_dict()})
        return described

    def _output_views(self, raw: Any, calls: int) -> tuple[list[list[Any]], list[list[Any]]]:
        """Each call's output leaves (tensors mapped from the worker's memory, or numbers) and
        where each tensor lies (its handle and offset)."""
        if not isinstance(raw, list) or len(raw) != calls:
            raise ChannelError(f"the worker described {len(raw) if isinstance(raw, list) else 0} calls' outputs, "
                               f"not {calls}")
        views, places = [], []
        for call in raw:
            if not isinstance(call, list) or len(call) > MAX_LEAVES:
                raise ChannelError("a call's outputs are not a list of at most 64 leaves")
            pairs = [self._output_leaf(item) for item in call]
            views.append([view for view, _ in pairs])
            places.append([place for _, place in pairs])
        return views, places

    def _output_leaf(self, item: Any) -> tuple[Any, Any]:
        if isinstance(item, dict) and "tensor" in item:
            leaf = read_leaf(item["tensor"], self.transport.handle_ok)
            return leaf_view(self.transport.open(leaf.handle), leaf), (leaf.handle, leaf.offset)
        if isinstance(item, dict) and type(item.get("value")) in (bool, int, float):
            return item["value"], None
        raise ChannelError("an output that is neither a tensor nor a number")

    def _own_gather_ms(self, args: list[Any], positions: list[Any]) -> float:
        """The same read as the candidate's first call's, of the judge's own reference outputs."""
        import torch

        from kevin_agent.evaluate.worker.correctness import flatten_outputs

        with torch.no_grad():
            leaves = flatten_outputs(self.judged.reference(*args))
        self.transport.synchronize()
        start = self.transport.mark()
        for leaf, pos in zip(leaves, positions, strict=False):
            if isinstance(leaf, torch.Tensor) and pos is not None and leaf.numel():
                _read(leaf, pos.clamp(max=leaf.numel() - 1))
        return self.transport.between(start, self.transport.mark())

    def _check(self, sets: list[list[Any]], outputs: list[list[Any]], positions: list[list[Any]],
               shapes: list[list[Any]]) -> None:
        for index, call_shapes in enumerate(shapes):
            if call_shapes != self.out_shapes:
                self.seen.problems.append(f"call {index + 1} of a batch observed outside your process returned "
                                          f"outputs of shapes {call_shapes}, expected {self.out_shapes}")
                return
        # compared with the reference: calls drawn now, after the batch (every call's values were read)
        chosen = sorted(random.SystemRandom().sample(range(len(sets)), min(len(sets), CHECKED_CALLS_PER_BATCH)))
        for index in chosen:
            args, got, pos = sets[index], outputs[index], positions[index]
            select = _selector(pos)
            problems = self.judged.check(args, got, f"call {index + 1} of a batch observed outside your process",
                                         select)
            self.seen.problems += problems[:1]
            if self.seen.problems:
                return


def _seed() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 1


def _leaf_of(tensor: Any, handle: str, offset: int) -> TensorLeaf:
    return TensorLeaf(handle, offset, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape))


def _leaves(output: Any) -> list[Any]:
    from kevin_agent.evaluate.worker.correctness import flatten_outputs

    return list(flatten_outputs(output))


def _aliased(places: list[list[Any]]) -> bool:
    """Two calls' outputs lie at the same place in the worker's memory (read after the batch,
    all but the last call's values are gone)."""
    seen = [place for call in places for place in call if place is not None]
    return len(seen) != len(set(seen))


def _positions(view: Any, device: Any) -> Any:
    """Where a leaf is read: every element of a small one, else ``SAMPLE_ELEMENTS`` positions drawn
    now (after the worker said it was done) from a fresh seed; None for a number."""
    import torch

    if not isinstance(view, torch.Tensor):
        return None
    numel = view.numel()
    if numel <= SAMPLE_ELEMENTS:
        return torch.arange(numel, device=device)
    generator = torch.Generator(device=device)
    generator.manual_seed(_seed())
    return torch.randint(0, numel, (SAMPLE_ELEMENTS,), generator=generator, device=device)


def _read(view: Any, positions: Any) -> Any:
    """A private copy of ``view``'s elements at ``positions`` (a number as is)."""
    if positions is None:
        return view
    return view.reshape(-1)[positions]


def _selector(positions: list[Any]) -> Callable[[int, Any], Any]:
    """``select(index, reference_leaf)``: the reference leaf at the positions read of that leaf; a
    leaf whose element count differs is left whole, so the comparison reports the shapes."""
    import torch

    def select(index: int, full: Any) -> Any:
        pos = positions[index] if index < len(positions) else None
        if pos is None or not isinstance(full, torch.Tensor):
            return full
        flat = full.reshape(-1)
        if pos.numel() and int(pos.max()) >= flat.numel():
            return full
        return flat[pos]

    return select


__all__ = ["Judged", "Observation", "observe"]
