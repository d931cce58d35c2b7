"""Units under the language server: the run manager's queue and cancel, refusals not logged as errors."""

from __future__ import annotations

import threading

from kevin_agent.data import Task
from kevin_agent.events import RunDone, VerdictReady
from kevin_agent.lsp.commands import CommandFailed
from kevin_agent.lsp.runs import RunManager, RunState
from kevin_agent.lsp.server import create_server
from kevin_agent.verdict_records import EnvironmentRecord, TimingRecord

TASK = Task(source="class Model: pass\n", class_name="Model")


class _Recorder:
    def __init__(self) -> None:
        self.changes: list[tuple[str, str]] = []

    def on_change(self, state, event) -> None:
        self.changes.append((state.uri, state.status))


def test_a_queued_run_cancelled_before_its_turn_never_plays():
    release, playing = threading.Event(), threading.Event()
    played: list[str] = []

    class Prepared:
        def __init__(self, state, events) -> None:
            self.run_id, self.state, self.events = f"run-{state.uri}", state, events

        def play(self, cancel) -> None:
            played.append(self.state.uri)
            playing.set()
            release.wait(300)  # a guard: the test releases it
            self.events(RunDone(self.run_id, None, None, cancelled=cancel.is_set()))

    listener = _Recorder()
    runs = RunManager(Prepared, listener)
    first = runs.submit(RunState("a", "Model", TASK, 1, 1))
    assert playing.wait(300)
    second = runs.submit(RunState("b", "Model", TASK, 1, 1))
    assert runs.cancel("b", "Model") and second.status == "cancelled"
    release.set()
    for _ in range(6000):  # a guard of 300 s: the run ends at once
        if not first.active:
            break
        threading.Event().wait(0.05)
    runs.close()
    assert runs._worker is not None
    runs._worker.join(300)
    assert played == ["a"] and first.status == "done" and second.status == "cancelled"
    assert ("b", "running") not in listener.changes


def test_a_command_refusal_is_not_reported_as_a_server_error(caplog):
    server = create_server()
    server.report_server_error(CommandFailed(message="a Kevin run for Model is already running"), None)
    assert not [r for r in caplog.records if "server error" in r.getMessage()]
    server.report_server_error(RuntimeError("boom"), None)
    assert [r for r in caplog.records if "server error" in r.getMessage()]


def _finished(speedup_vs_eager: float, speedup_vs_compile: float | None) -> RunState:
    from kevin_agent.data import Candidate, Stage, Verdict, VerdictDetails

    details = VerdictDetails(
        timing=TimingRecord(speedup_vs_eager=speedup_vs_eager, speedup_vs_compile=speedup_vs_compile),
        environment=EnvironmentRecord(gpu_name="NVIDIA H200"),
    )
    state = RunState("a", "Block", TASK, 1, 1, status="done")
    best = (Candidate(0, 0, id="t0.0"), Verdict(Stage.TIMING, True, "ok", details))
    state.view.apply(VerdictReady("run", *best))
    state.view.apply(RunDone("run", *best))
    return state


def test_result_message_says_plainly_when_torch_compile_is_the_better_choice():
    from kevin_agent.lsp.reporting import result_message

    win = result_message(_finished(1.84, 1.21))
    assert win == "Kevin: 1.84x vs eager for Block (1.21x vs torch.compile on NVIDIA H200)"
    loses_to_compile = result_message(_finished(1.3, 0.8))
    assert loses_to_compile.endswith(": torch.compile is the better choice for this module")
    slower_than_eager = result_message(_finished(0.7, 0.9))
    assert slower_than_eager.endswith(": eager PyTorch is the better choice for this module")
