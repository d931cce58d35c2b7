"""The profiled GPU work of one forward call, as plain data, and how it is read from a trace.

``KernelActivity`` is what the attribution layer consumes: one row per (name, kind, launch
context) with its number of calls and summed device time. It serialises to JSON; a list of them
in a ``kevin-provenance-trace/1`` file is the "recorded profiler trace" the CPU tests run on.

``activities_from_chrome_trace`` turns the Chrome-trace JSON that ``torch.profiler`` exports
(Kineto's format) into activities. Each GPU activity (``kernel``, ``gpu_memcpy``, ``gpu_memset``)
is joined by its ``correlation`` id to the runtime or driver call that launched it
(``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaMemsetAsync``, ``cudaGraphLaunch``...), and that
call to the CPU ops and annotations that enclose it on its thread (``aten::mm``,
``Torch-Compiled Region: 0/0``...): the *launch context*. When the ``FORWARD_ANNOTATION`` range is
in the trace, work launched inside it, and work launched by any other thread from the moment it
opened, is kept; only what came before it (the session's throwaway padding) is dropped.
Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TRACE_FORMAT = "kevin-provenance-trace/1"
FORWARD_ANNOTATION = "kevin::forward"
KINDS = ("kernel", "memcpy", "memset")
CONTEXT_DEPTH = 6  # innermost enclosing CPU ops kept per activity

_GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
                   "memcpy": "memcpy", "memset": "memset"}
_LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
_CPU_CATEGORIES = {"cpu_op", "user_annotation", "operator", "python_function"}


@dataclass(frozen=True)
class KernelActivity:
    """GPU work of one name, kind and launch context during one profiled call."""

    name: str  # as the profiler reports it (Kineto demangles kernel names)
    kind: str = "kernel"  # kernel | memcpy | memset
    calls: int = 1
    ms: float = 0.0  # summed device time of the calls
    context: tuple[str, ...] = ()  # enclosing CPU ops/annotations at launch, outermost first
    api: str = ""  # the runtime/driver call that launched it

    @property
    def launcher(self) -> str:
        """The innermost CPU op or annotation that launched it ("" when launched outside any)."""
        return self.context[-1] if self.context else ""

    def to_dict(self) -> dict[str, Any]:
        raw = asdict(self)
        raw["context"] = list(self.context)
        return raw

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> KernelActivity:
        return cls(name=str(raw["name"]), kind=str(raw.get("kind", "kernel")), calls=int(raw.get("calls", 1)),
                   ms=float(raw.get("ms", 0.0)), context=tuple(raw.get("context") or ()), api=str(raw.get("api", "")))


@dataclass
class ProfileTrace:
    """One profiled forward call: its activities plus where and how it was recorded."""

    activities: list[KernelActivity]
    label: str = ""  # e.g. "candidate" or "reference"
    source: str = "recorded"  # "recorded" (a real profiler run) or "hand-made"
    device: str = ""
    torch_version: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def launches(self) -> int:
        return launch_count(self.activities)

    def to_dict(self) -> dict[str, Any]:
        return {"format": TRACE_FORMAT, "label": self.label, "source": self.source, "device": self.device,
                "torch_version": self.torch_version, "meta": self.meta,
                "activities": [a.to_dict() for a in self.activities]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ProfileTrace:
        if raw.get("format", TRACE_FORMAT) != TRACE_FORMAT:
            raise ValueError(f"not a {TRACE_FORMAT} trace: {raw.get('format')!r}")
        return cls(activities=[KernelActivity.from_dict(a) for a in raw.get("activities") or ()],
                   label=str(raw.get("label", "")), source=str(raw.get("source", "recorded")),
                   device=str(raw.get("device", "")), torch_version=str(raw.get("torch_version", "")),
                   meta=dict(raw.get("meta") or {}))

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> ProfileTrace:
        return cls.from_dict(json.loads(Path(path).read_text()))


def launch_count(activities: Iterable[KernelActivity]) -> int:
    """GPU operations launched: kernel launches plus memcpy/memset operations."""
    return sum(a.calls for a in activities)


def device_ms(activities: Iterable[KernelActivity]) -> float:
    return sum(a.ms for a in activities)


@dataclass
class _Span:
    start: float
    end: float
    name: str
    external_id: Any = None


def activities_from_chrome_trace(raw: dict[str, Any] | list[dict[str, Any]],
                                 annotation: str | None = FORWARD_ANNOTATION) -> list[KernelActivity]:
    """Activities of a Kineto Chrome trace, aggregated by (name, kind, context)."""
    events = raw.get("traceEvents", []) if isinstance(raw, dict) else raw
    gpu, launches, cpu = _split_events(events)
    contexts = _launch_contexts(launches, cpu)
    since = forward_start(cpu, annotation)
    totals: dict[tuple[str, str, tuple[str, ...], str], list[float]] = {}
    for event, kind in gpu:
        correlation = _correlation(event)
        launch = launches.get(correlation) if correlation is not None else None
        stack = contexts.get(correlation, ()) if correlation is not None else ()
        if since is not None and not in_forward(event, launch, stack, annotation, since):
            continue
        inner = tuple(n for n in stack if n != annotation)[-CONTEXT_DEPTH:]
        key = (str(event.get("name", "")), kind, inner, str(launch.get("name", "")) if launch else "")
        entry = totals.setdefault(key, [0, 0.0])
        entry[0] += 1
        entry[1] += float(event.get("dur") or 0.0) / 1000.0  # Chrome traces hold microseconds
    return [KernelActivity(name, kind, int(calls), ms, context, api)
            for (name, kind, context, api), (calls, ms) in totals.items()]


def forward_start(cpu: dict[tuple[Any, Any], list[_Span]], annotation: str | None) -> float | None:
    """When the forward range opened (None: no such range in the trace, keep everything)."""
    if annotation is None:
        return None
    starts = [s.start for spans in cpu.values() for s in spans if s.name == annotation]
    return min(starts) if starts else None


def in_forward(event: dict[str, Any], launch: dict[str, Any] | None, stack: tuple[str, ...],
               annotation: str | None, since: float) -> bool:
    """Whether a GPU activity belongs to the forward call: launched inside its range, or launched
    (by any thread of the process: a helper thread, a callback) from the moment the range opened
    until the profile ended, which is after the whole-device synchronize that follows the call.
    An activity with no launch record counts by its own start time. Only the throwaway padding
    before the range is left out (issue 19: launches from every thread are attributed)."""
    if annotation in stack:
        return True
    when = float((launch if launch is not None else event).get("ts") or 0.0)
    return when >= since


_KERNEL_LAUNCH_APIS = ("LaunchKernel", "LaunchCooperativeKernel")  # cudaLaunchKernel(ExC), cuLaunchKernel(Ex)...


def unrecorded_launches(raw: dict[str, Any] | list[dict[str, Any]], annotation: str | None = FORWARD_ANNOTATION) -> int:
    """Kernel launches (runtime/driver calls inside ``annotation``) that have no kernel record.

    Every ``cudaLaunchKernel``-like call must show up as a GPU kernel with its correlation id; one
    that does not means the profiler lost it (CUPTI is known to hand back corrupt records at the
    head of a session, pytorch#192021), and a trace missing kernels cannot be judged."""
    events = raw.get("traceEvents", []) if isinstance(raw, dict) else raw
    gpu, launches, cpu = _split_events(events)
    contexts = _launch_contexts(launches, cpu)
    recorded = {_correlation(event) for event, _ in gpu}
    since = forward_start(cpu, annotation)
    missing = 0
    for correlation, launch in launches.items():
        name = str(launch.get("name", ""))
        if not any(api in name for api in _KERNEL_LAUNCH_APIS):
            continue
        if since is not None and not in_forward(launch, launch, contexts.get(correlation, ()), annotation, since):
            continue
        if correlation not in recorded:
            missing += 1
    return missing


def _split_events(events: Iterable[dict[str, Any]]):
    gpu: list[tuple[dict[str, Any], str]] = []
    launches: dict[Any, dict[str, Any]] = {}
    cpu: dict[tuple[Any, Any], list[_Span]] = {}
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        category = str(event.get("cat", "")).lower()
        if category in _GPU_CATEGORIES:
            gpu.append((event, _GPU_CATEGORIES[category]))
        elif category in _LAUNCH_CATEGORIES:
            correlation = _correlation(event)
            if correlation is not None:
                launches[correlation] = event
        elif category in _CPU_CATEGORIES and category != "python_function":
            start = float(event.get("ts") or 0.0)
            cpu.setdefault((event.get("pid"), event.get("tid")), []).append(
                _Span(start, start + float(event.get("dur") or 0.0), str(event.get("name", "")),
                      (event.get("args") or {}).get("External id")))
    return gpu, launches, cpu


def _correlation(event: dict[str, Any]) -> Any:
    args = event.get("args") or {}
    return args.get("correlation", args.get("correlation id"))


def _launch_contexts(launches: dict[Any, dict[str, Any]], cpu: dict[tuple[Any, Any], list[_Span]]
                     ) -> dict[Any, tuple[str, ...]]:
    """correlation id -> names of the CPU spans enclosing the launch call, outermost first.

    One sweep per thread over spans sorted by start (outer before inner) and launches sorted by
    time, keeping the stack of spans still open; spans on one thread nest.
    """
    by_thread: dict[tuple[Any, Any], list[tuple[float, Any]]] = {}
    for correlation, launch in launches.items():
        key = (launch.get("pid"), launch.get("tid"))
        by_thread.setdefault(key, []).append((float(launch.get("ts") or 0.0), correlation))
    contexts: dict[Any, tuple[str, ...]] = {}
    for key, queries in by_thread.items():
        spans = sorted(cpu.get(key, ()), key=lambda s: (s.start, -s.end))
        stack: list[_Span] = []
        index = 0
        for when, correlation in sorted(queries, key=lambda q: q[0]):
            while index < len(spans) and spans[index].start <= when:
                span = spans[index]
                while stack and stack[-1].end < span.start:
                    stack.pop()
                stack.append(span)
                index += 1
            contexts[correlation] = tuple(s.name for s in stack if s.end >= when)
    _contexts_by_external_id(launches, cpu, contexts)
    return contexts


def _contexts_by_external_id(launches: dict[Any, dict[str, Any]], cpu: dict[tuple[Any, Any], list[_Span]],
                             contexts: dict[Any, tuple[str, ...]]) -> None:
    """Fallback for launches recorded on a thread with no CPU spans: Kineto stamps each launch with
    the ``External id`` of the innermost CPU op or range open at the time; that op and the spans
    enclosing it on its own thread are the context."""
    by_id: dict[Any, tuple[tuple[Any, Any], _Span]] = {}
    for key, spans in cpu.items():
        for span in spans:
            if span.external_id is not None:
                by_id[span.external_id] = (key, span)
    for correlation, launch in launches.items():
        if contexts.get(correlation):
            continue
        found = by_id.get((launch.get("args") or {}).get("External id"))
        if found is None:
            continue
        key, inner = found
        enclosing = [s for s in cpu[key] if s.start <= inner.start and s.end >= inner.end]
        contexts[correlation] = tuple(s.name for s in sorted(enclosing, key=lambda s: (s.start, -s.end)))
