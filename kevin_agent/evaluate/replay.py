"""The evaluator double: recorded verdicts instead of a GPU, for tests and demos without one.

A JSON file holds ``{"verdicts": [Verdict.to_dict(), ...]}`` (served in order across calls,
wrapping around) and/or ``{"by_marker": {"MARKER": Verdict.to_dict()}}`` (the first marker, in
file order, found in the candidate code picks the verdict; markers win over the ordered list).
Optional ``"default"`` (a verdict for candidates nothing else matches) and ``"delay_s"`` (sleep
per candidate, to test cancellation). The real static checks run first, so reward hacks are
rejected even here. Every recorded verdict served comes back with ``details.environment.replayed=True``: it
keeps the GPU it was measured on (``gpu_name``) and the run it was measured in (``measured_in``),
and gets ``gpu_name="replay"`` only when the recording names no GPU. Faces label such verdicts
"measured on GPU in run X, replayed here" (verdict_text.measured_label): never a measurement here.

A recording (a file with a ``recorded`` block, as ``examples/record_verdicts.py`` writes) binds each
verdict to what it judged: ``"recorded_for": {"task_sha256": ..., "code_sha256": ...}`` inside the
verdict, the SHA-256 of the task's source and of the candidate's code (``source_hash``). Such a
file replays a verdict only for that task and that exact code: another task is refused in one line
(``UserInputError``), other code gets a failed verdict saying no verdict was recorded for it, so no
answer is ever credited with another's numbers. A recording without the hashes is refused (record
it again). Hand-written files without a ``recorded`` block (test doubles) are matched by marker or
order, as they say.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kevin_agent.data import REPLAY_GPU_NAME, Stage, Task, Verdict, VerdictDetails
from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.api import Evaluator, QueueCallback, VerdictCallback, WaitCallback
from kevin_agent.evaluate.verdicts import cancelled_verdict, static_verdict

BINDING_KEY = "recorded_for"  # inside a recorded verdict: the task and code it judged


def source_hash(text: str) -> str:
    """The SHA-256 (hex) of a task's source or a candidate's code, as recorded and as checked."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Binding:
    """What a recorded verdict judged: the task's source and the candidate's code, by hash."""

    task_sha256: str
    code_sha256: str


def _parse_verdict(raw: Any, where: str) -> Verdict:
    try:
        return Verdict.from_dict(raw)
    except (KeyError, TypeError, ValueError) as err:
        raise UserInputError(f"replay file: bad verdict at {where}: {err}") from None


def _binding(raw: Any) -> Optional[Binding]:
    bound = raw.get(BINDING_KEY) if isinstance(raw, dict) else None
    if not isinstance(bound, dict):
        return None
    task, code = bound.get("task_sha256"), bound.get("code_sha256")
    return Binding(task, code) if isinstance(task, str) and isinstance(code, str) else None


def _bindings(path: Path, raw: dict[str, Any]) -> dict[str, Binding]:
    """Each marker's binding; a recording (``recorded`` block) must bind every verdict it holds."""
    found = {marker: _binding(v) for marker, v in raw.get("by_marker", {}).items()}
    if "recorded" in raw and (raw.get("verdicts") or raw.get("default") or None in found.values()):
        raise UserInputError(
            f"replay file {path} was recorded without the task and code hashes a replay is checked "
            "against; record it again (python examples/record_verdicts.py)")
    return {marker: binding for marker, binding in found.items() if binding is not None}


class ReplayEvaluator(Evaluator):
    """An ``Evaluator`` serving a file of recorded verdicts."""

    gpu_name = REPLAY_GPU_NAME  # this evaluator measures nothing
    replayed = True  # its verdicts are recordings (loop.runtime names no GPU in prompts from it)

    def __init__(self, path: str | Path, *, delay_s: Optional[float] = None) -> None:
        self.path = Path(path)
        try:
            raw = json.loads(self.path.read_text())
        except OSError as err:
            raise UserInputError(f"replay file {self.path} cannot be read: {err.strerror}") from None
        except ValueError as err:
            raise UserInputError(f"replay file {self.path} is not valid JSON: {err}") from None
        if not isinstance(raw, dict) or not ({"verdicts", "by_marker", "default"} & set(raw)):
            raise UserInputError(f"replay file {self.path} needs 'verdicts', 'by_marker' or 'default'")
        self.ordered = [_parse_verdict(v, f"verdicts[{i}]") for i, v in enumerate(raw.get("verdicts", []))]
        self.by_marker = {m: _parse_verdict(v, f"by_marker[{m!r}]") for m, v in raw.get("by_marker", {}).items()}
        self.bound = _bindings(self.path, raw)  # marker -> binding; every marker of a recording
        recorded = raw.get("recorded")
        self.recorded_class = str(recorded.get("class_name") or "") if isinstance(recorded, dict) else ""
        self.default = _parse_verdict(raw["default"], "default") if raw.get("default") else None
        self.delay_s = float(delay_s if delay_s is not None else raw.get("delay_s", 0.0))
        self._next = 0
        self._lock = threading.Lock()

    def check_task(self, task: Task) -> None:
        """UserInputError (one line) when this file's recording was made for another task."""
        if not self.bound:
            return
        if any(b.task_sha256 == source_hash(task.source) for b in self.bound.values()):
            return
        recorded = f" ({self.recorded_class})" if self.recorded_class else ""
        raise UserInputError(
            f"replay file {self.path} holds verdicts recorded for another task{recorded}, not this one "
            f"({task.class_name}); refusing to replay another task's numbers")

    def pick(self, code: str, task: Optional[Task] = None) -> Verdict:
        """The recorded verdict for ``code`` (a fresh copy, marked as a replay); in a recording,
        only the verdict recorded for this code on this task."""
        chosen = self._bound_verdict(code, task) if self.bound else self._unbound_verdict(code)
        verdict = copy.deepcopy(chosen)
        verdict.details.environment.replayed = True
        verdict.details.environment.gpu_name = verdict.details.environment.gpu_name or REPLAY_GPU_NAME
        return verdict

    def _bound_verdict(self, code: str, task: Optional[Task]) -> Verdict:
        wanted = Binding(source_hash(task.source) if task is not None else "", source_hash(code))
        for marker, binding in self.bound.items():
            if binding == wanted:
                return self.by_marker[marker]
        named = next((m for m in self.bound if m in code), None)
        why = (f"the verdict recorded for {named!r} judged other code (this code was edited since)"
               if named else "no verdict was recorded for this code")
        return _no_verdict(f"{why}; a replay serves only the recorded answers of the recorded task")

    def _unbound_verdict(self, code: str) -> Verdict:
        chosen = next((v for m, v in self.by_marker.items() if m in code), None)
        if chosen is None and self.ordered:
            with self._lock:
                chosen = self.ordered[self._next % len(self.ordered)]
                self._next += 1
        return chosen or self.default or _no_verdict("the replay file has no verdict for this answer")

    def evaluate(
        self,
        task: Task,
        codes: Sequence[str],
        *,
        on_verdict: Optional[VerdictCallback] = None,
        on_queue: Optional[QueueCallback] = None,
        cancel: Optional[threading.Event] = None,
        on_wait: Optional[WaitCallback] = None,
    ) -> list[Verdict]:
        """Static checks, then recorded verdicts one at a time; cancel honoured between them."""
        self.check_task(task)
        verdicts: list[Verdict] = []
        pending = len(codes)
        if on_queue is not None:
            on_queue(0, pending)
        for index, code in enumerate(codes):
            if cancel is not None and cancel.is_set():
                verdicts.append(cancelled_verdict(Stage.FORMAT))
                continue
            verdict = static_verdict(code, task.source)
            if verdict is None:
                if self.delay_s > 0 and cancel is not None and cancel.wait(self.delay_s):
                    verdicts.append(cancelled_verdict(Stage.STATIC))
                    continue
                if self.delay_s > 0 and cancel is None:
                    threading.Event().wait(self.delay_s)
                verdict = self.pick(code, task)
            verdicts.append(verdict)
            if on_verdict is not None:
                on_verdict(index, verdict)
            pending -= 1
            if on_queue is not None:
                on_queue(0, pending)
        return verdicts


def _no_verdict(why: str) -> Verdict:
    """A failed verdict for an answer the replay file has nothing recorded for."""
    return Verdict(Stage.LOAD, False, f"Not judged: {why}.", VerdictDetails(error=f"replay: {why}"))
