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
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from kevin_agent import feedback
from kevin_agent.data import REPLAY_GPU_NAME, Stage, Task, Verdict, VerdictDetails
from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.api import Evaluator, QueueCallback, VerdictCallback, WaitCallback
from kevin_agent.evaluate.verdicts import cancelled_verdict, static_verdict


def _parse_verdict(raw: Any, where: str) -> Verdict:
    try:
        return Verdict.from_dict(raw)
    except (KeyError, TypeError, ValueError) as err:
        raise UserInputError(f"replay file: bad verdict at {where}: {err}") from None


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
        self.default = _parse_verdict(raw["default"], "default") if raw.get("default") else None
        self.delay_s = float(delay_s if delay_s is not None else raw.get("delay_s", 0.0))
        self._next = 0
        self._lock = threading.Lock()

    def pick(self, code: str) -> Verdict:
        """The recorded verdict for ``code`` (a fresh copy, marked as a replay)."""
        chosen = next((v for m, v in self.by_marker.items() if m in code), None)
        if chosen is None and self.ordered:
            with self._lock:
                chosen = self.ordered[self._next % len(self.ordered)]
                self._next += 1
        if chosen is None:
            chosen = self.default or Verdict(
                Stage.LOAD, False, feedback.runtime_error("the replay file has no verdict for this answer"),
                VerdictDetails(error="no replay verdict"),
            )
        verdict = copy.deepcopy(chosen)
        verdict.details.environment.replayed = True
        verdict.details.environment.gpu_name = verdict.details.environment.gpu_name or REPLAY_GPU_NAME
        return verdict

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
                verdict = self.pick(code)
            verdicts.append(verdict)
            if on_verdict is not None:
                on_verdict(index, verdict)
            pending -= 1
            if on_queue is not None:
                on_queue(0, pending)
        return verdicts
