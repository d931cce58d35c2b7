"""Timing stage: CUDA events, warm-up, L2 flushed before every trial, median and spread.

Every timing call goes through a ``Clock`` built from the objects the worker captured before any
candidate code ran, so a candidate that patches ``torch.cuda.Event`` or ``time.perf_counter`` cannot
change the numbers. Escaping work (a kernel launched on a private stream that the timed stream never
waits for) is detected by also timing a few trials with a whole-device synchronize before the end
event: if the event-only median is under half of that, the timing is flagged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kevin_agent.data import TimingStats

DEFAULT_FLUSH_BYTES = 256 * 1024 * 1024  # when the device does not report its L2 size
MIN_TRIALS = 20  # adaptive timing: never fewer timed runs than this
BATCH_TRIALS = 10  # adaptive timing: trials between stability checks
STABLE_HALF_WIDTH = 0.01  # stop once the median's 95% interval is within +-1% of the median
Z_95 = 1.959964
ESCAPE_RATIO = 0.5  # event-only median below this fraction of the synced one: suspicious
ESCAPE_MIN_GAP_MS = 0.01  # ignore gaps smaller than this (launch and wake-up noise)
# The profiler's record (CUPTI's kernel timestamps, not the events the timer reads): a median under
# this share of the GPU time one profiled call used is not believed. A third leaves room for honest
# kernels overlapped on a few streams (their summed time exceeds the wall) and for warm caches.
PROFILE_AGREEMENT = 1.0 / 3.0
# Timed calls (issue 19): each is called on the staging buffers holding the next input set of a
# small pool (seeds from os.urandom), so an answer that remembers outputs by address returns the
# wrong set's. After each call returns, a draw decides whether its output joins a uniform random
# sample (reservoir) of TIMED_SAMPLES calls, checked at the end: each check costs a reference
# forward. An answer wrong on a share f of the calls escapes with probability (1 - f)^4.
TIMING_POOL_SETS = 3
TIMED_SAMPLES = 4
# Lead-in: before each timed call's start event the device is held busy (a GPU sleep) for twice
# the host's median time to issue one call, so the call's launches are already queued when the
# start event runs. Without it, a call made on an idle device (rotation synchronizes before every
# refill) times the host's Python and launch overhead too, which the baseline's queued calls hide.
LEAD_IN_DEFAULT_MS = 0.2  # before any warm-up call was measured
LEAD_IN_MIN_MS = 0.05
LEAD_IN_MAX_MS = 2.0


def median_interval(sorted_ms: Sequence[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median: the order statistics
    ``n/2 -+ 1.96 sqrt(n)/2`` (binomial, normal approximation), clamped to the sample."""
    n = len(sorted_ms)
    half = Z_95 * math.sqrt(n) / 2.0
    low = max(0, math.floor(n / 2.0 - half) - 1)
    high = min(n - 1, math.ceil(n / 2.0 + half) - 1)
    return sorted_ms[low], sorted_ms[high]


def stats_from_samples(samples_ms: Sequence[float]) -> TimingStats:
    """Median (with its 95% interval), mean, min, max and interquartile range (milliseconds)."""
    if not samples_ms:
        raise ValueError("no timing samples")
    values = sorted(float(v) for v in samples_ms)
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    low, high = median_interval(values)
    return TimingStats(
        median_ms=statistics.median(values),
        mean_ms=statistics.fmean(values),
        min_ms=values[0],
        max_ms=values[-1],
        iqr_ms=q3 - q1,
        trials=len(values),
        ci_low_ms=low,
        ci_high_ms=high,
    )


def is_stable(samples_ms: Sequence[float], floor: int = MIN_TRIALS,
              half_width: float = STABLE_HALF_WIDTH) -> bool:
    """Enough trials, and the median's 95% interval within ``half_width`` of the median."""
    if len(samples_ms) < floor:
        return False
    values = sorted(samples_ms)
    middle = statistics.median(values)
    low, high = median_interval(values)
    return middle > 0 and max(middle - low, high - middle) <= half_width * middle


def spread_of_medians(medians_ms: Sequence[float]) -> float:
    """(max - min) / median of several rounds' medians: the run-to-run reproducibility."""
    middle = statistics.median(medians_ms)
    return (max(medians_ms) - min(medians_ms)) / middle if middle > 0 else 0.0


def lead_in_ms(host_call_ms: Sequence[float]) -> float:
    """How long to hold the device before a timed call: twice the host's median issue time of a
    warm call, within [LEAD_IN_MIN_MS, LEAD_IN_MAX_MS]; the default when nothing was measured."""
    if not host_call_ms:
        return LEAD_IN_DEFAULT_MS
    return min(LEAD_IN_MAX_MS, max(LEAD_IN_MIN_MS, 2.0 * statistics.median(host_call_ms)))


def profile_disagreement(event_median_ms: float, profiled_gpu_ms: float | None) -> str | None:
    """Why the timed median cannot be right given the profiler's record of one call (the GPU time
    its kernels and copies used, from CUPTI), or None: timing rewritten from inside the process
    (events recorded late, elapsed times replaced in native code) shows as a gap between the two."""
    if profiled_gpu_ms is None or profiled_gpu_ms <= 0:
        return None
    if profiled_gpu_ms - event_median_ms < ESCAPE_MIN_GAP_MS or event_median_ms >= PROFILE_AGREEMENT * profiled_gpu_ms:
        return None
    return (f"timed faster than the profiler saw it run: {event_median_ms:.4f} ms measured with CUDA events, "
            f"but one profiled call used {profiled_gpu_ms:.4f} ms of GPU time")


def flush_buffer_bytes(l2_cache_bytes: int | None) -> int:
    """A buffer larger than twice the L2 cache (256 MiB when the size is unknown)."""
    if not l2_cache_bytes or l2_cache_bytes <= 0:
        return DEFAULT_FLUSH_BYTES
    return 2 * int(l2_cache_bytes) + (1 << 20)


def escape_reason(event_median_ms: float, synced_median_ms: float, sync_overhead_ms: float) -> str | None:
    """Why the event-only timing looks like work escaped the timed stream, or None."""
    synced_work = synced_median_ms - sync_overhead_ms
    if synced_work - event_median_ms < ESCAPE_MIN_GAP_MS:
        return None
    if event_median_ms >= ESCAPE_RATIO * synced_work:
        return None
    return (
        f"work escapes the timed stream: {event_median_ms:.4f} ms measured with CUDA events but "
        f"{synced_work:.4f} ms when the whole device is synchronized before the end event "
        "(kernels launched on another stream are not timed)"
    )


@dataclass(frozen=True)
class Clock:
    """Timing primitives captured before any candidate code ran."""

    event_class: Any  # torch.cuda.Event
    record: Callable[..., Any]  # torch.cuda.Event.record
    elapsed_time: Callable[[Any, Any], float]
    synchronize: Callable[[], None]  # torch.cuda.synchronize (whole device)
    perf_counter: Callable[[], float]
    stream: Any  # the stream timing records on (the worker's current stream at start)
    hold: Callable[[float], Any] = lambda ms: None  # keep the device busy ``ms`` (on ``stream``)

    @classmethod
    def from_captured(cls, captured: Any, stream: Any, cycles_per_ms: float = 0.0) -> Clock:
        sleep = captured.get("torch.cuda._sleep")

        def hold(ms: float) -> None:
            if sleep is not None and cycles_per_ms > 0:
                sleep(int(ms * cycles_per_ms))

        return cls(
            event_class=captured.get("torch.cuda.Event"),
            record=captured.get("torch.cuda.Event.record"),
            elapsed_time=captured.get("torch.cuda.Event.elapsed_time"),
            synchronize=captured.get("torch.cuda.synchronize"),
            perf_counter=captured.get("time.perf_counter"),
            stream=stream,
            hold=hold,
        )

    def event(self) -> Any:
        return self.event_class(enable_timing=True)


@dataclass
class Rotation:
    """The input sets timed calls rotate through. The candidate is always called with
    ``staging`` (the same buffers), into which the next set of ``pool`` is copied before the flush
    and the start event (untimed); ``returned`` decides after each call, at random, whether its
    output is kept (as a private copy, ``keep``) for checking against the reference."""

    pool: list[Any]  # input sets (tuples of arguments) on the device
    staging: Any  # what the candidate is called with: a private copy of pool[0], refilled per call
    refill: Callable[[Any, Any], Any]  # (staging, input set) -> the call's arguments (the set copied in)
    keep: Callable[[Any], Any]  # output -> a private copy (or raises what is wrong with it)
    draw: Callable[[], float]  # uniform [0, 1) from a source the candidate cannot predict
    limit: int = TIMED_SAMPLES
    settle: Callable[[], None] = lambda: None  # whole-device synchronize: work left on other streams ends
    kept: list[tuple[int, Any]] = field(default_factory=list)  # (pool index, output copy)
    seeds: list[int] = field(default_factory=list)  # the seed each pool set was made from (for the judge)
    calls: int = 0

    def next_args(self) -> tuple[int, Any]:
        """The next set in the staging buffers, once the device is idle (work a previous call left
        on another stream must not read half-refilled inputs: the escape check judges that)."""
        index = self.calls % len(self.pool)
        self.calls += 1
        self.settle()
        return index, self.refill(self.staging, self.pool[index])

    def returned(self, index: int, output: Any) -> None:
        """Reservoir sampling over every call so far, decided after the call returned."""
        slot = int(self.draw() * self.calls)
        if len(self.kept) < self.limit or slot < self.limit:
            self.settle()  # as correctness does: the whole device done before the output is read
            kept = (index, self.keep(output))
            if len(self.kept) < self.limit:
                self.kept.append(kept)
            else:
                self.kept[slot] = kept


class Timer:
    """Times callables on one device with a flush buffer zeroed before every trial. ``args`` may
    be a ``Rotation``: each call then gets the next input set, and its output may be kept. Each
    trial's start event follows a lead-in (``lead_in_ms`` of the warm-up calls' issue times)."""

    def __init__(self, clock: Clock, flush: Callable[[], Any]) -> None:
        self.clock = clock
        self.flush = flush
        self.lead_ms = LEAD_IN_DEFAULT_MS

    def time(self, fn: Callable[..., Any], args: Sequence[Any] | Rotation, trials: int, warmup: int) -> list[float]:
        """Event-only times (ms) of ``trials`` runs after ``warmup`` untimed runs."""
        import torch

        c = self.clock
        with torch.no_grad():
            issue_ms = []
            for _ in range(warmup):
                index, call_args = _next(args)
                issued = c.perf_counter()
                out = fn(*call_args)
                issue_ms.append((c.perf_counter() - issued) * 1000.0)
                _returned(args, index, out)
            if issue_ms:
                self.lead_ms = lead_in_ms(issue_ms[1:] or issue_ms)  # the first call may build or warm
            c.synchronize()
            pairs = []
            for _ in range(trials):
                index, call_args = _next(args)
                self.flush()
                c.hold(self.lead_ms)
                start, end = c.event(), c.event()
                c.record(start, c.stream)
                out = fn(*call_args)
                c.record(end, c.stream)
                _returned(args, index, out)
                pairs.append((start, end))
            c.synchronize()
        return [c.elapsed_time(start, end) for start, end in pairs]

    def time_adaptive(self, fn: Callable[..., Any], args: Sequence[Any] | Rotation, cap: int, warmup: int,
                      floor: int = MIN_TRIALS) -> list[float]:
        """Event-only times (ms): batches of ``BATCH_TRIALS`` until ``is_stable`` or ``cap`` runs
        (at least ``min(floor, cap)``); each trial still L2-flushed."""
        samples = self.time(fn, args, min(BATCH_TRIALS, cap), warmup)
        while len(samples) < cap and not is_stable(samples, min(floor, cap)):
            samples += self.time(fn, args, min(BATCH_TRIALS, cap - len(samples)), 0)
        return samples

    def time_synced(self, fn: Callable[..., Any], args: Sequence[Any] | Rotation, trials: int) -> list[float]:
        """Times (ms) with a whole-device synchronize before the end event of each trial."""
        import torch

        c = self.clock
        times = []
        with torch.no_grad():
            for _ in range(trials):
                index, call_args = _next(args)
                self.flush()
                c.hold(self.lead_ms)
                start, end = c.event(), c.event()
                c.record(start, c.stream)
                out = fn(*call_args)
                c.synchronize()
                c.record(end, c.stream)
                c.synchronize()
                _returned(args, index, out)
                times.append(c.elapsed_time(start, end))
        return times

    def sync_overhead_ms(self, trials: int = 10) -> float:
        """Median synced time of an empty call: what ``time_synced`` adds by itself."""
        return statistics.median(self.time_synced(lambda: None, (), trials))

    def first_call_seconds(self, fn: Callable[..., Any], args: Sequence[Any]) -> float:
        """Wall time of one call including device completion (e.g. torch.compile's build)."""
        import torch

        c = self.clock
        c.synchronize()
        started = c.perf_counter()
        with torch.no_grad():
            fn(*args)
        c.synchronize()
        return c.perf_counter() - started


class _WallEvent:
    def __init__(self, enable_timing: bool = True) -> None:
        self.at = 0.0


def wall_clock() -> Clock:
    """A ``Clock`` on the host's ``time.perf_counter`` instead of CUDA events: the stages on a
    machine without a GPU (CPU tests of the worker's wiring)."""
    import time

    def record(event: _WallEvent, stream: Any = None) -> None:
        event.at = time.perf_counter()

    return Clock(_WallEvent, record, lambda a, b: (b.at - a.at) * 1000.0, lambda: None, time.perf_counter, None)


def _next(args: Any) -> tuple[int, Any]:
    return args.next_args() if isinstance(args, Rotation) else (0, args)


def _returned(args: Any, index: int, output: Any) -> None:
    if isinstance(args, Rotation):
        args.returned(index, output)


def make_flush(device: Any) -> Callable[[], Any]:
    """A function that zeroes a buffer larger than twice the device's L2 cache."""
    import torch

    props = torch.cuda.get_device_properties(device)
    size = flush_buffer_bytes(getattr(props, "L2_cache_size", None))
    buffer = torch.empty(size, dtype=torch.uint8, device=device)
    return buffer.zero_


def device_cycles_per_ms(device: Any) -> float:
    """The device's SM clock in cycles per millisecond, for ``Clock.hold``: its reported kHz (at
    a lower real clock a hold lasts longer, never shorter), else measured with a timed GPU sleep.
    Runs before any candidate code."""
    import torch

    reported = getattr(torch.cuda.get_device_properties(device), "clock_rate", 0)
    if reported:
        return float(reported)
    cycles = 2_000_000
    with torch.cuda.device(device):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)  # the sleep kernel's first launch loads it
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        elapsed_ms = start.elapsed_time(end)
    return cycles / elapsed_ms if elapsed_ms > 0 else 0.0


def escape_trials(timing_trials: int) -> int:
    """How many synced trials the escape check uses."""
    return max(5, min(20, timing_trials // 5))
