"""The Kevin loop: m trajectories x n turns of generate -> parse -> evaluate -> feed back.

Each turn sends every live trajectory's conversation to the backend in one batch, parses the
replies, and hands all parseable candidates to the evaluator in one batch (it compiles in parallel
and times on the GPU one at a time). Everything is written to the store as it happens and reported
as UI-neutral events. Cancel at any point keeps finished work; ``resume`` continues a stored run.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Optional

from kevin_agent import feedback
from kevin_agent.backends.base import Backend, Completion, SamplingParams
from kevin_agent.data import Candidate, Stage, Task, Verdict
from kevin_agent.errors import KevinError, UserInputError
from kevin_agent.evaluate.api import Evaluator
from kevin_agent.events import (
    CandidateGenerated,
    EventSink,
    GpuWaiting,
    ModelRetrying,
    QueueChanged,
    RunDone,
    RunFailed,
    RunStarted,
    TokensGenerated,
    TurnDone,
    TurnStarted,
    VerdictReady,
    ignore_events,
)
from kevin_agent.loop.runtime import (
    StepFailed,
    complete_cancellable,
    context_budget,
    target_gpu_name,
    token_counter,
)
from kevin_agent.loop.settings import RunSettings
from kevin_agent.loop.trajectories import (
    ResumePoint,
    Trajectory,
    beam_due,
    best_of,
    candidate_id,
    fork_beam,
    resume_point,
)
from kevin_agent.run_record import RunRecord
from kevin_agent.store import RunStore

__all__ = ["RunSettings", "Session", "new_run_id"]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


class Session:
    """One run of the loop over a task; ``run`` emits events and returns the stored record."""

    def __init__(
        self,
        task: Task,
        settings: RunSettings,
        backend: Backend,
        evaluator: Evaluator,
        store: RunStore,
        events: EventSink = ignore_events,
        run_id: Optional[str] = None,
    ) -> None:
        settings.validate()
        self.task = task
        self.settings = settings
        self.backend = backend
        self.evaluator = evaluator
        self.store = store
        self.events = events
        self.run_id = run_id or new_run_id()
        backend.on_retry = lambda message: self.events(ModelRetrying(self.run_id, message))
        self.failure: Optional[KevinError] = None  # why the run failed, when it did
        self._resuming: Optional[ResumePoint] = None
        self._lock = threading.Lock()

    @classmethod
    def resumed(cls, record: RunRecord, settings: RunSettings, backend: Backend, evaluator: Evaluator,
                store: RunStore, events: EventSink = ignore_events) -> Session:
        """A session continuing a stored run: finished turns kept, the interrupted turn redone
        (its stored candidates are evaluated again only when they have no verdict yet)."""
        if record.status == "done":
            raise UserInputError(f"run {record.run_id} is already done; `kevin show {record.run_id}`")
        session = cls(record.task, settings, backend, evaluator, store, events, record.run_id)
        session._resuming = resume_point(record, settings)
        return session

    # -- public --------------------------------------------------------------------------------

    def run(self, cancel: Optional[threading.Event] = None) -> RunRecord:
        """Play the remaining turns; never raises for backend or evaluator failures (RunFailed)."""
        cancel = cancel or threading.Event()
        point = self._start()
        self.events(RunStarted(self.run_id, self.task.class_name,
                               self.settings.trajectories, self.settings.turns))
        try:
            cancelled = self._play(point, cancel)
        except StepFailed as failed:
            self.failure = failed.error
            self._record_failure(str(failed.error))
            return self.store.load_run(self.run_id)
        except BaseException as err:  # never leave a dead run marked "running"
            self._mark_stopped(err)
            raise
        notes = () if cancelled else self._baseline_drift()
        self.store.set_status(self.run_id, "cancelled" if cancelled else "done")
        record = self.store.load_run(self.run_id)
        best = record.best()
        self.events(RunDone(self.run_id, best[0] if best else None, best[1] if best else None,
                            cancelled=cancelled, notes=notes))
        return record

    def _mark_stopped(self, err: BaseException) -> None:
        """Record why the run stopped on an unexpected error (cancelled on Ctrl-C), as far as the
        store still can; the error itself goes on to the caller."""
        try:
            if isinstance(err, KeyboardInterrupt):
                self.store.set_status(self.run_id, "cancelled")
                return
            self._record_failure(f"stopped by an unexpected error: {type(err).__name__}: {err}")
        except Exception:  # the store or the sink is what broke: the caller still gets err
            pass

    def _record_failure(self, message: str) -> None:
        self.store.set_status(self.run_id, "failed", message)
        self.events(RunFailed(self.run_id, message))

    def _baseline_drift(self) -> tuple[str, ...]:
        """The baselines measured again at the end, and how far they moved (kept with the run)."""
        try:
            notes = tuple(d.text() for d in self.evaluator.remeasure(self.task))
        except Exception as err:  # a baseline that cannot be re-measured is reported, not fatal
            notes = (f"the baselines could not be measured again at the end: {err}",)
        if notes:
            self.store.add_notes(self.run_id, notes)
        return notes

    # -- the loop ------------------------------------------------------------------------------

    def _start(self) -> ResumePoint:
        if self._resuming is not None:
            self.store.set_status(self.run_id, "running")
            return self._resuming
        self.store.create_run(self.run_id, self.task, self.settings.to_dict())
        lanes = [Trajectory(index=i) for i in range(self.settings.trajectories)]
        return ResumePoint(lanes=lanes, turn=0, partial={}, best=0.0)

    def _play(self, point: ResumePoint, cancel: threading.Event) -> bool:
        """Returns True when cancelled."""
        lanes, partial = point.lanes, point.partial
        self._gpu_name = target_gpu_name(self.evaluator, self.settings)
        for turn in range(point.turn, self.settings.turns):
            if self._target_reached(lanes):
                return False
            if cancel.is_set():
                return True
            self.events(TurnStarted(self.run_id, turn))
            if not self._play_turn(turn, lanes, partial, cancel):
                return True
            partial = {}
            self.events(TurnDone(self.run_id, turn, best_of(lanes)))
            if beam_due(self.settings, turn) and not self._target_reached(lanes):
                lanes = fork_beam(lanes, self.settings.beam_keep or 1)
        return False

    def _target_reached(self, lanes: list[Trajectory]) -> bool:
        target = self.settings.target_speedup
        return target is not None and best_of(lanes) >= target

    def _play_turn(
        self,
        turn: int,
        lanes: list[Trajectory],
        partial: dict[int, tuple[Candidate, Optional[Verdict]]],
        cancel: threading.Event,
    ) -> bool:
        """One turn for every lane; False when cancelled (finished work is already stored)."""
        results: dict[int, tuple[Candidate, Verdict]] = {}
        to_evaluate: list[tuple[int, Candidate]] = []
        to_generate: list[Trajectory] = []
        for lane in lanes:
            stored = partial.get(lane.index)
            if stored is None:
                to_generate.append(lane)
            elif stored[1] is not None:
                results[lane.index] = (stored[0], stored[1])
            else:
                to_evaluate.append((lane.index, stored[0]))
        if to_generate:
            generated = self._generate(turn, to_generate, cancel)
            if generated is None:
                return False
            for index, candidate, verdict in generated:
                if verdict is None:
                    to_evaluate.append((index, candidate))
                else:
                    results[index] = (candidate, verdict)
        if to_evaluate:
            evaluated = self._evaluate(to_evaluate, cancel)
            if evaluated is None:
                return False
            results.update(evaluated)
        for lane in lanes:
            lane.history.append(results[lane.index])
        return True

    def _generate(
        self, turn: int, lanes: list[Trajectory], cancel: threading.Event
    ) -> Optional[list[tuple[int, Candidate, Optional[Verdict]]]]:
        """Ask the backend for one reply per lane; format errors get their verdict at once."""
        from kevin_agent.prompts import build_messages

        budget = context_budget(self.backend, self.settings)
        count = token_counter(self.backend, self.settings)
        conversations = [
            build_messages(self.task, lane.history, self._gpu_name, budget, count, policy=self.settings.eval.policy)
            for lane in lanes
        ]
        completions = complete_cancellable(
            self.backend, conversations, self._sampling(), self._token_reporter(turn, lanes), cancel
        )
        if completions is None:
            return None
        if len(completions) != len(lanes):
            raise StepFailed(KevinError(
                f"the {self.backend.name} backend returned {len(completions)} completions "
                f"for {len(lanes)} conversations"))
        errors = [c.error for c in completions if c.error]
        down = [c.error for c in completions if c.error and c.server_down]
        if down or len(errors) == len(completions):  # the server, not one request: the run stops
            raise StepFailed(KevinError(f"model request failed: {(down or errors)[0]}"))
        self.events(TokensGenerated(self.run_id, turn,
                                    {lane.index: c.tokens for lane, c in zip(lanes, completions)}))
        out: list[tuple[int, Candidate, Optional[Verdict]]] = []
        for lane, messages, completion in zip(lanes, conversations, completions):
            candidate = self._parse(completion, lane.index, turn)
            self.store.add_candidate(self.run_id, candidate, messages, lane.last_id)
            self.events(CandidateGenerated(self.run_id, candidate))
            verdict: Optional[Verdict] = None
            if candidate.parse_error or candidate.code is None:
                problem = candidate.parse_error or "no code block defining ModelNew was found"
                verdict = Verdict(stage=Stage.FORMAT, ok=False, message=feedback.format_error(problem))
                self._record(candidate, verdict)
            out.append((lane.index, candidate, verdict))
        return out

    def _parse(self, completion: Completion, trajectory: int, turn: int) -> Candidate:
        """The candidate of one reply; a failed request is a format error (parse_completion)."""
        from kevin_agent.parsing import parse_completion

        candidate = parse_completion(completion, trajectory, turn)
        candidate.id = candidate_id(trajectory, turn)
        return candidate

    def _evaluate(
        self, pending: Sequence[tuple[int, Candidate]], cancel: threading.Event
    ) -> Optional[dict[int, tuple[Candidate, Verdict]]]:
        """Evaluate parseable candidates in one batch; None when cancelled before all finished."""
        delivered: dict[int, Verdict] = {}

        def on_verdict(position: int, verdict: Verdict) -> None:
            with self._lock:
                if position in delivered or cancel.is_set():
                    return
                delivered[position] = verdict
            self._record(pending[position][1], verdict)

        def on_queue(compiling: int, timing: int) -> None:
            self.events(QueueChanged(self.run_id, compiling, timing))

        def on_wait(message: str) -> None:
            self.events(GpuWaiting(self.run_id, message))

        codes = [candidate.code or "" for _, candidate in pending]
        try:
            verdicts = self.evaluator.evaluate(
                self.task, codes, on_verdict=on_verdict, on_queue=on_queue, cancel=cancel, on_wait=on_wait
            )
        except KevinError as err:
            raise StepFailed(err) from None
        except Exception as err:  # an evaluator bug must not lose the run: record it as failed
            raise StepFailed(KevinError(f"the evaluator failed: {type(err).__name__}: {err}")) from None
        if cancel.is_set():
            return None
        if len(verdicts) != len(codes):
            raise StepFailed(KevinError(
                f"the evaluator returned {len(verdicts)} verdicts for {len(codes)} candidates"))
        for position, verdict in enumerate(verdicts):
            with self._lock:
                missing = position not in delivered
                if missing:
                    delivered[position] = verdict
            if missing:
                self._record(pending[position][1], verdict)
        return {index: (candidate, delivered[pos]) for pos, (index, candidate) in enumerate(pending)}

    # -- helpers -------------------------------------------------------------------------------

    def _record(self, candidate: Candidate, verdict: Verdict) -> None:
        self.store.add_verdict(self.run_id, candidate.id, verdict)
        self.events(VerdictReady(self.run_id, candidate, verdict))

    def _sampling(self) -> SamplingParams:
        backend = self.settings.backend
        return SamplingParams(temperature=backend.temperature, max_tokens=backend.max_tokens)

    def _token_reporter(self, turn: int, lanes: list[Trajectory]) -> Callable[[int, int], None]:
        counts: dict[int, int] = {}
        last = [0.0]

        def on_tokens(position: int, tokens: int) -> None:
            with self._lock:
                counts[lanes[position].index] = tokens
                now = time.monotonic()
                if now - last[0] < 0.1:
                    return
                last[0] = now
                snapshot = dict(counts)
            self.events(TokensGenerated(self.run_id, turn, snapshot))

        return on_tokens
