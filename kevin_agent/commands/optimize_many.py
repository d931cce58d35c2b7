"""``kevin optimize A.py::X B.py::Y ...``: several classes as one batch.

Every class is loaded, then every run opened, before any plays: a bad target or setting is told in
one line and nothing starts. Each class gets its own stored run; they play side by side through
the one evaluator the service hands runs of the same settings, so one class's builds overlap
another's baselines and GPU stages. Progress is plain lines on stderr, each led by its class (live
panels cannot share a terminal). Ctrl-C cancels them all, keeps finished work and prints each
unfinished run's resume command; a second quits at once. ``optimize_cmd`` reports each run (``--json``:
one list) and exits with the first non-zero code of the runs, in the order given.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Sequence
from typing import Optional

from kevin_agent.progress import PlainProgress
from kevin_agent.runs.request import RunRequest
from kevin_agent.runs.service import PreparedRun, RunOutcome, RunService, fresh_run_ids


def loaded(requests: Sequence[RunRequest]) -> list[RunRequest]:
    """Each request with its task loaded and its own run id (UserInputError on the first bad target)."""
    from kevin_agent.task import load_task

    tasks = [load_task(request.target or "") for request in requests]
    return [dataclasses.replace(request, target=None, task=task, run_id=run_id)
            for request, task, run_id in zip(requests, tasks, fresh_run_ids(len(requests)))]


def open_all(service: RunService, requests: Sequence[RunRequest]) -> list[PreparedRun]:
    """Every run opened, or none: a failure releases those already open and is raised."""
    opened: list[PreparedRun] = []
    try:
        for request in requests:
            task = request.task
            prefix = f"[{task.class_name}] " if task is not None else ""
            opened.append(service.open(request, PlainProgress(sys.stderr, prefix=prefix)))
    except BaseException:
        for prepared in opened:
            prepared.release()
        raise
    return opened


def play_all(prepared: Sequence[PreparedRun], cancel: threading.Event,
             outcomes: list[Optional[RunOutcome]]) -> list[RunOutcome]:
    """Every run played on its own thread until all have ended; ``outcomes`` fills in as each ends
    (None: still playing); the outcomes in order."""
    errors: list[BaseException] = []

    def play(index: int) -> None:
        try:
            outcomes[index] = prepared[index].play(cancel)
        except BaseException as err:  # a bug: the others are cancelled and it surfaces
            errors.append(err)
            cancel.set()

    threads = [threading.Thread(target=play, args=(i,), name=f"kevin-optimize-{i}", daemon=True)
               for i in range(len(prepared))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [outcome for outcome in outcomes if outcome is not None]


def run_many(requests: Sequence[RunRequest]) -> list[RunOutcome]:
    """Load, open, then play every request as one batch; the outcomes in the order given."""
    from kevin_agent.commands.interrupts import play_interruptible

    with RunService() as service:
        prepared = open_all(service, loaded(requests))
        names = ", ".join(f"{p.task.class_name} (run {p.run_id})" for p in prepared)
        print(f"kevin optimize: {len(prepared)} classes as one batch: {names}", file=sys.stderr, flush=True)

        def cancelling() -> None:
            print("kevin optimize: cancelling every run; finished work is kept (Ctrl-C again to quit now)",
                  file=sys.stderr, flush=True)

        outcomes: list[Optional[RunOutcome]] = [None] * len(prepared)

        def quitting() -> None:
            playing = [run for run, outcome in zip(prepared, outcomes) if outcome is None]
            for run in playing:
                run.abandon()
            resumes = "; ".join(f"kevin optimize --resume {run.run_id}" for run in playing)
            print(f"kevin optimize: stopped; continue with {resumes}", file=sys.stderr, flush=True)

        return play_interruptible(lambda cancel: play_all(prepared, cancel, outcomes), threading.Event(),
                                  name="kevin-session", on_cancel=cancelling, on_quit=quitting)
