"""The run service as each face uses it: start, resume, cancel, close, and one player per run.

Real parts throughout: the scripted backend, the replay evaluator, a SQLite store in a temp folder.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from loop_fixtures import TASK_FILE, write_replay, write_script

from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.events import RunDone, RunStarted, TurnDone, VerdictReady
from kevin_agent.runs.request import RunRequest
from kevin_agent.runs.service import RunService
from kevin_agent.runs.state import RunView
from kevin_agent.store import RunStore

PLAN = {(0, 0): "slow", (1, 0): "broken", (0, 1): "quick", (1, 1): "wrong"}
ROOT = Path(__file__).resolve().parents[1]


class CountingReplay(ReplayEvaluator):
    """The replay evaluator, counting closes."""

    closed = 0

    def close(self) -> None:
        CountingReplay.closed += 1


@pytest.fixture()
def project(tmp_path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "add.py").write_text(TASK_FILE.read_text())
    return folder


def request(project: Path, tmp_path: Path, plan=PLAN, **overrides) -> RunRequest:
    script = write_script(tmp_path / "script.json", plan)
    values: dict[str, Any] = dict(target=str(project / "add.py"), trajectories=2, turns=2, config_dir=project,
                  backend_flags={"backend": "scripted", "script": str(script)},
                  evaluator=f"replay:{write_replay(tmp_path / 'replay.json', 0.2)}", gpu_name="NVIDIA H100")
    values.update(overrides)
    return RunRequest(**values)


def test_cli_use_one_run_then_close_everything(project, tmp_path):
    events: list[Any] = []
    made = []

    def make_evaluator(spec, settings):
        made.append(CountingReplay(spec.removeprefix("replay:")))
        return made[-1]

    CountingReplay.closed = 0
    with RunService(environ={}, make_evaluator=make_evaluator) as service:
        outcome = service.run(request(project, tmp_path), events.append)
        store = service.store_for(project)
        assert outcome.exit_code == 0 and outcome.record.status == "done"
        best = store.load_run(outcome.record.run_id).best()
        assert best is not None and best[0].id == "t0.1"
    assert len(made) == 1 and CountingReplay.closed == 1  # the service closed what it opened
    with pytest.raises(EnvironmentProblem, match="closed database"):
        store.list_runs()  # the store is closed too
    view = RunView()
    for event in events:
        view.apply(event)
    assert view.status == "done" and view.evaluated == 4 and view.best_speedup == pytest.approx(2.0)
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunDone)


def test_cancel_then_resume_continues_the_stored_run(project, tmp_path):
    cancel = threading.Event()

    def stop_after_first_verdict(event):
        if isinstance(event, VerdictReady):
            cancel.set()

    with RunService(environ={}) as service:
        first = service.open(request(project, tmp_path), stop_after_first_verdict)
        cancelled = first.play(cancel)
        assert cancelled.exit_code == 130 and cancelled.record.status == "cancelled"
        kept = [c.id for c, v in cancelled.record.candidates if v is not None]
        resumed = service.run(RunRequest(resume=first.run_id, config_dir=project))
    assert resumed.record.run_id == first.run_id and resumed.record.status == "done"
    assert [c.id for c, v in resumed.record.candidates if v is not None] == ["t0.0", "t1.0", "t0.1", "t1.1"]
    assert set(kept) <= {"t0.0", "t1.0"}
    with pytest.raises(UserInputError, match="already done"):
        RunService(environ={}).open(RunRequest(resume=first.run_id, config_dir=project))


def test_language_server_use_many_runs_share_one_evaluator(project, tmp_path):
    opened = []

    def make_evaluator(spec, settings):
        opened.append(spec)
        return ReplayEvaluator(spec.removeprefix("replay:"))

    from kevin_agent.task import load_task

    task = load_task(str(project / "add.py"))
    with RunService(environ={}, make_evaluator=make_evaluator) as service:
        base = request(project, tmp_path, target=None, task=task)
        outcomes = [service.run(base) for _ in range(2)]
    assert [o.record.status for o in outcomes] == ["done", "done"]
    assert outcomes[0].record.run_id != outcomes[1].record.run_id
    assert len(opened) == 1  # warm workers are kept between runs


def test_terminal_ui_use_injected_evaluator_and_store_are_not_closed(project, tmp_path):
    replay = CountingReplay(write_replay(tmp_path / "r.json"))
    CountingReplay.closed = 0
    store = RunStore(tmp_path / "store" / "runs.sqlite")
    service = RunService(environ={}, evaluator=replay, store=store)
    outcome = service.run(request(project, tmp_path, run_id="fixed-id"))
    service.close()
    assert outcome.record.run_id == "fixed-id" and CountingReplay.closed == 0
    assert store.load_run("fixed-id").status == "done"  # still open: it belongs to the caller


def test_bad_requests_are_one_line_errors(project, tmp_path):
    with RunService(environ={}) as service:
        with pytest.raises(UserInputError, match="name a module"):
            service.open(RunRequest(config_dir=project))
        with pytest.raises(UserInputError, match="not both"):
            service.open(RunRequest(target="add.py", resume="latest", config_dir=project))
        with pytest.raises(UserInputError, match="at least 1"):
            service.open(request(project, tmp_path, trajectories=0))


HOLD = """
import sys, threading
from pathlib import Path
from kevin_agent.runs.request import RunRequest
from kevin_agent.runs.service import RunService
service = RunService(environ={})
prepared = service.open(RunRequest(resume=sys.argv[1], config_dir=Path(sys.argv[2])))
print("locked", flush=True)
sys.stdin.readline()
"""


def test_a_run_is_played_by_one_process_at_a_time(project, tmp_path):
    with RunService(environ={}) as service:
        cancel = threading.Event()
        cancel.set()  # stops before any turn: the run stays resumable
        run_id = service.open(request(project, tmp_path)).play(cancel).record.run_id
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, run_id, str(project)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(UserInputError, match=f"pid {holder.pid}"):
            RunService(environ={}).open(RunRequest(resume=run_id, config_dir=project))
    finally:
        holder.kill()
        holder.wait(10)
    with RunService(environ={}) as service:  # the holder died: its lock went with it
        assert service.run(RunRequest(resume=run_id, config_dir=project)).record.status == "done"


class BrokenRemeasure(ReplayEvaluator):
    """The replay evaluator whose end-of-run baseline check breaks with a plain error."""

    def remeasure(self, task):
        raise RuntimeError("worker pipe broke")


def test_an_unexpected_error_marks_the_run_failed_not_running(project, tmp_path):
    def broken_sink(event):  # breaks between turns, outside the evaluator's own error handling
        if isinstance(event, TurnDone):
            raise RuntimeError("the console went away")

    with RunService(environ={}) as service:
        prepared = service.open(request(project, tmp_path), broken_sink)
        with pytest.raises(RuntimeError, match="console went away"):
            prepared.play(threading.Event())
        stored = service.store_for(project).load_run(prepared.run_id)
    assert stored.status == "failed"  # resumable, and no longer shown as a live run
    with RunService(environ={}) as service:
        assert service.run(RunRequest(resume=prepared.run_id, config_dir=project)).record.status == "done"


def test_a_baseline_check_that_breaks_is_a_note_not_a_stuck_run(project, tmp_path):
    def make_evaluator(spec, settings):
        return BrokenRemeasure(spec.removeprefix("replay:"))

    with RunService(environ={}, make_evaluator=make_evaluator) as service:
        outcome = service.run(request(project, tmp_path))
    assert outcome.record.status == "done"
    assert any("could not be measured again" in note and "worker pipe broke" in note
               for note in outcome.record.notes)


# `kevin optimize` in a child process whose evaluator, once called, says so and then ignores
# cancel (like a long final measurement): only the second Ctrl-C can end the command.
DEAF_KEVIN = """
import sys, time
from kevin_agent.evaluate.replay import ReplayEvaluator

def deaf(self, task, codes, **kwargs):
    print("kevin-test: evaluating", file=sys.stderr, flush=True)
    time.sleep(600)  # a guard only: the test's second SIGINT ends the process

ReplayEvaluator.evaluate = deaf
from kevin_agent.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _lines(stream) -> queue.Queue[str]:
    """The stream's lines, read on a thread (a blocking read never stalls the test's signals)."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)
        lines.put("")  # end of stream

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _read_until(lines: queue.Queue[str], wanted: str, seen: list[str]) -> None:
    while True:
        line = lines.get(timeout=600)  # a guard only: each line comes as soon as the child gets there
        seen.append(line)
        assert line, f"the command ended before saying {wanted!r}:\n{''.join(seen)}"
        if wanted in line:
            return


def test_a_second_ctrl_c_marks_the_run_cancelled_and_says_how_to_resume(project, tmp_path):
    """Real SIGINTs to a real `kevin optimize` process: the first (once the run is evaluating)
    cancels, the second (once the first was handled) quits with 130, marks the run cancelled and
    says how to resume it."""
    import re
    import signal

    script = write_script(tmp_path / "script.json", PLAN)
    replay = write_replay(tmp_path / "replay.json", 0.0)
    command = [sys.executable, "-c", DEAF_KEVIN, "optimize", str(project / "add.py"), "-m", "1", "-n", "1",
               "--backend", "scripted", "--script", str(script), "--evaluator", f"replay:{replay}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    child = subprocess.Popen(command, cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        lines = _lines(child.stderr)
        _read_until(lines, "kevin-test: evaluating", seen)
        child.send_signal(signal.SIGINT)
        _read_until(lines, "cancelling; finished work is kept", seen)
        child.send_signal(signal.SIGINT)
        _read_until(lines, "kevin optimize: stopped; continue with", seen)
        assert child.wait(timeout=600) == 130, "".join(seen)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    found = re.search(r"kevin optimize --resume (\S+)`", "".join(seen))
    assert found, "".join(seen)
    with RunService(environ={}) as service:
        assert service.store_for(project).load_run(found.group(1)).status == "cancelled"


def test_a_relative_replay_file_is_stored_absolute_and_resumes_from_elsewhere(project, tmp_path, monkeypatch):
    write_replay(tmp_path / "replay.json", 0.0)
    monkeypatch.chdir(tmp_path)
    with RunService(environ={}) as service:
        prepared = service.open(request(project, tmp_path, evaluator="replay:replay.json"))
        cancel = threading.Event()
        cancel.set()  # stop before the first turn: the run stays resumable
        run_id = prepared.play(cancel).record.run_id
        stored = service.store_for(project).load_run(run_id).settings["evaluator"]
    assert stored == f"replay:{tmp_path / 'replay.json'}"
    monkeypatch.chdir(project)
    with RunService(environ={}) as service:
        assert service.run(RunRequest(resume=run_id, config_dir=project)).record.status == "done"


def test_listed_runs_say_when_their_best_was_replayed(project, tmp_path):
    from kevin_agent.run_table import best_text

    with RunService(environ={}) as service:
        replayed_run = service.run(request(project, tmp_path)).record
        store = service.store_for(project)
        store.create_run("measured-1", replayed_run.task, {"evaluator": "cuda"})
        listed = {run.run_id: run for run in store.list_runs()}
    assert listed[replayed_run.run_id].replayed and best_text(listed[replayed_run.run_id]) == "2.00x (replayed)"
    assert not listed["measured-1"].replayed and best_text(listed["measured-1"]) == "-"


def test_resume_reads_the_run_under_its_lock(project, tmp_path, monkeypatch):
    """Another player holds the run and finishes it just after a resume would read it: the
    resume must take the lock before it reads, so it is refused, never plays a finished run."""
    from kevin_agent.runs.locks import RunLock

    with RunService(environ={}) as service:
        cancel = threading.Event()
        cancel.set()  # stops before any turn: the run stays resumable
        run_id = service.open(request(project, tmp_path)).play(cancel).record.run_id
        store_path = service.store_for(project).path
    other_store = RunStore(store_path)
    other_player = RunLock.take(other_store, run_id)
    real_load_run = RunStore.load_run
    finished: list[str] = []

    def load_then_the_other_player_finishes(store, wanted):
        record = real_load_run(store, wanted)
        if wanted == run_id and not finished:
            other_store.set_status(run_id, "done")
            other_player.release()
            finished.append(run_id)
        return record

    monkeypatch.setattr(RunStore, "load_run", load_then_the_other_player_finishes)
    try:
        with RunService(environ={}) as service:
            with pytest.raises(UserInputError, match="already being played|already done"):
                service.open(RunRequest(resume=run_id, config_dir=project))
    finally:
        other_player.release()
        other_store.close()


@pytest.mark.parametrize("failure", ["done", "evaluator", "backend"])
def test_a_resume_that_fails_to_open_leaves_the_run_unlocked(project, tmp_path, failure):
    """Opening a resume takes the run's lock first; every way the opening can fail after that
    (the run is finished, the evaluator or the backend cannot be made) must give the lock back,
    or the run stays "already being played" for as long as this process (an editor's server, the
    TUI) lives. The failure is kept alive meanwhile, as a face holding the error would."""
    from kevin_agent.runs.locks import RunLock

    def make_evaluator(spec, settings):
        if failure == "evaluator":
            raise EnvironmentProblem("no GPU here")
        return ReplayEvaluator(spec.removeprefix("replay:"))

    with RunService(environ={}) as service:
        cancel = threading.Event()
        cancel.set()
        run_id = service.open(request(project, tmp_path)).play(cancel).record.run_id
        if failure == "done":
            service.store_for(project).set_status(run_id, "done")
    given = {"base_url": "ftp://nowhere"} if failure == "backend" else {}
    with RunService(environ={}, make_evaluator=make_evaluator) as service:
        with pytest.raises((UserInputError, EnvironmentProblem)) as caught:
            service.open(RunRequest(resume=run_id, config_dir=project, backend_flags=given))
        other = RunLock.take(service.store_for(project), run_id)  # refused if the lock was kept
        other.release()
    assert caught.value is not None
