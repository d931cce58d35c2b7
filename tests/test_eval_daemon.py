"""The warm evaluator (``evaluate.daemon``): its address, its server over a real Unix socket, and
``kevin eval`` answered by a real one (a replay evaluator stands in for the GPU)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

import pytest

from kevin_agent.data import Stage, Task, Verdict, VerdictDetails
from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.evaluate.api import EvalSettings, Evaluator
from kevin_agent.evaluate.daemon.address import (
    DaemonAddress,
    daemon_address,
    idle_seconds,
)
from kevin_agent.evaluate.daemon.client import daemon_environment, evaluate_on_daemon, start_daemon, stop_daemons
from kevin_agent.evaluate.daemon.server import held_lock, serve

KERNELS = Path(__file__).parent / "fixtures" / "kernels"
TASK = Task(source=(KERNELS / "add_task.py").read_text(), class_name="Model")
GOOD = (KERNELS / "add_candidate.py").read_text()
WAIT = 60.0  # generous: a loaded CI machine; a pass never waits this long


def verdict(message: str) -> Verdict:
    return Verdict(Stage.TIMING, True, message, VerdictDetails())


class FakeEvaluator(Evaluator):
    """Says two waits, then answers ``mode``: a verdict, a hang until cancelled, or an error."""

    def __init__(self, mode: str = "verdict") -> None:
        self.mode = mode
        self.starts = 0
        self.closed = False
        self.cancelled = threading.Event()
        self.seen: list[str] = []
        self.barrier = threading.Barrier(2)
        self.events: list[str] = []

    def start(self) -> None:
        self.starts += 1
        self.events.append("start")

    def close(self) -> None:
        self.closed = True

    def evaluate(self, task: Task, codes: Sequence[str], *, on_verdict: Any = None, on_queue: Any = None,
                 cancel: Optional[threading.Event] = None, on_wait: Any = None) -> list[Verdict]:
        self.seen.append(codes[0])
        self.events.append("evaluate")
        on_wait("first wait")
        on_wait("second wait")
        if self.mode == "hang":
            assert cancel is not None
            cancel.wait(WAIT)
            if cancel.is_set():
                self.cancelled.set()
            return [verdict("cancelled")]
        if self.mode == "together":  # returns only while another request is inside evaluate too
            self.barrier.wait(WAIT)
        if self.mode == "input":
            raise UserInputError("the reference task failed: boom")
        if self.mode == "environment":
            raise EnvironmentProblem("the GPU fell off the bus")
        return [verdict(f"judged {len(codes[0])} characters")]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder with a short path (a socket's path holds 108 bytes; pytest's tmp_path can be longer)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kd-", dir="/tmp") as folder:
        yield Path(folder)


def served(address: DaemonAddress, evaluator: Evaluator, idle_s: float = WAIT) -> tuple[threading.Thread, list[int]]:
    """``serve`` in a thread, once its socket listens."""
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(serve(address, EvalSettings(), idle_s,
                                                                make=lambda _: evaluator)), daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not address.socket.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return thread, codes


def test_a_request_hears_the_waits_then_the_verdict_and_the_workers_are_topped_up(short_tmp: Path) -> None:
    address = DaemonAddress(short_tmp, "k1")
    fake = FakeEvaluator()
    thread, codes = served(address, fake, idle_s=1.0)
    waits: list[str] = []
    first = evaluate_on_daemon(address, TASK, "abc", on_wait=waits.append)
    second = evaluate_on_daemon(address, TASK, "abcdef", on_wait=waits.append)
    thread.join(WAIT)
    assert first is not None and first.message == "judged 3 characters"
    assert second is not None and second.message == "judged 6 characters"
    assert waits == ["first wait", "second wait"] * 2
    assert fake.seen == ["abc", "abcdef"]
    # started before the first request; topped up after the last one (and after the first when
    # the second arrived only once it had ended)
    assert fake.events[0] == "start" and fake.events[-1] == "start" and fake.events.count("evaluate") == 2
    assert codes == [0] and fake.closed  # idle: it ended by itself
    assert not address.socket.exists()


def test_concurrent_requests_are_evaluated_side_by_side(short_tmp: Path) -> None:
    address = DaemonAddress(short_tmp, "k8")
    fake = FakeEvaluator("together")
    thread, codes = served(address, fake, idle_s=1.0)
    answers: list[Optional[Verdict]] = []
    callers = [threading.Thread(target=lambda c=code: answers.append(evaluate_on_daemon(address, TASK, c)))
               for code in ("a", "bb")]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(WAIT)
    thread.join(WAIT)
    assert sorted(a.message for a in answers if a is not None) == ["judged 1 characters", "judged 2 characters"]
    assert not fake.barrier.broken and codes == [0]


def test_hanging_up_cancels_the_evaluation(short_tmp: Path) -> None:
    address = DaemonAddress(short_tmp, "k2")
    fake = FakeEvaluator("hang")
    thread, _ = served(address, fake, idle_s=2.0)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(address.socket))
    conn.sendall(json.dumps({"task": TASK.to_dict(), "code": "x"}).encode() + b"\n")
    assert conn.recv(4096).startswith(b'{"wait"')  # it is evaluating
    conn.close()  # Ctrl-C in kevin eval
    assert fake.cancelled.wait(WAIT)
    thread.join(WAIT)


def test_a_failing_reference_raises_in_the_client_as_bad_input(short_tmp: Path) -> None:
    address = DaemonAddress(short_tmp, "k3")
    thread, codes = served(address, FakeEvaluator("input"), idle_s=1.0)
    with pytest.raises(UserInputError, match="the reference task failed: boom"):
        evaluate_on_daemon(address, TASK, "x")
    thread.join(WAIT)
    assert codes == [0]  # it went on serving until idle


def test_an_environment_failure_raises_in_the_client_and_ends_the_daemon(short_tmp: Path) -> None:
    address = DaemonAddress(short_tmp, "k4")
    fake = FakeEvaluator("environment")
    thread, codes = served(address, fake)
    with pytest.raises(EnvironmentProblem, match="fell off the bus"):
        evaluate_on_daemon(address, TASK, "x")
    thread.join(WAIT)
    assert codes == [1] and fake.closed and not address.socket.exists()


def test_a_second_daemon_at_one_address_leaves_at_once(short_tmp: Path) -> None:
    address = DaemonAddress(short_tmp, "k5")
    with held_lock(address) as mine:
        assert mine
        fake = FakeEvaluator()
        assert serve(address, EvalSettings(), WAIT, make=lambda _: fake) == 0
        assert fake.starts == 0 and not address.socket.exists()


def test_a_stale_socket_or_none_means_evaluate_here(short_tmp: Path) -> None:
    address = DaemonAddress(short_tmp, "k6")
    assert evaluate_on_daemon(address, TASK, "x") is None  # none started
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(address.socket))
    dead.close()  # its file stays, nobody listens: a daemon that was killed
    assert address.socket.exists()
    assert evaluate_on_daemon(address, TASK, "x") is None


def test_a_daemon_that_dies_mid_request_means_evaluate_here(short_tmp: Path) -> None:
    address = DaemonAddress(short_tmp, "k7")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(address.socket))
    listener.listen(1)

    def die_after_a_wait() -> None:
        conn, _ = listener.accept()
        conn.recv(1 << 20)
        conn.sendall(b'{"wait": "measuring"}\n{"verd')  # then it crashes
        conn.close()

    threading.Thread(target=die_after_a_wait, daemon=True).start()
    waits: list[str] = []
    assert evaluate_on_daemon(address, TASK, "x", on_wait=waits.append) is None
    assert waits == ["measuring"]
    listener.close()


# -- the address ---------------------------------------------------------------------------------


def test_settings_round_trip_through_the_wire() -> None:
    settings = EvalSettings(correctness_trials=3, arch="8.6", cache_dir=Path("/x/y"), policy="partial")
    assert EvalSettings.from_dict(json.loads(json.dumps(settings.to_dict())), unknown="refuse") == settings
    with pytest.raises(ValueError, match="unknown settings: bogus"):
        EvalSettings.from_dict({**settings.to_dict(), "bogus": 1}, unknown="refuse")
    assert EvalSettings.from_dict({**settings.to_dict(), "bogus": 1}, unknown="ignore") == settings
    with pytest.raises(ValueError, match="sandbox 'loose'"):
        EvalSettings.from_dict({"sandbox": "loose"}, unknown="ignore")


CHANGED: dict[str, Any] = {"correctness_trials": 3, "timing_trials": 7, "warmup_trials": 2, "with_torch_compile": False,
           "compile_timeout_s": 12.0, "run_timeout_s": 9.0, "arch": "8.6", "seed": 7, "policy": "partial",
           "sandbox": "off", "observe": True}


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_every_setting_that_changes_a_verdict_changes_the_address(short_tmp: Path, field: str) -> None:
    base = EvalSettings(cache_dir=short_tmp, compile_timeout_s=300.0)
    first = daemon_address(base, {}, short_tmp)
    other = daemon_address(dataclasses.replace(base, **{field: CHANGED[field]}), {}, short_tmp)
    assert first is not None and other is not None
    assert first.key != other.key and first.folder == other.folder == short_tmp / "daemon"


def test_the_fields_listed_above_are_every_field_kept_in_a_daemon() -> None:
    skipped = {"compile_only", "fresh_baselines", "cluster", "cache_dir"}  # no daemon, or the folder itself
    assert set(CHANGED) | skipped == {f.name for f in dataclasses.fields(EvalSettings)}


@pytest.mark.parametrize("variable", ["PATH", "CUDA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST", "CUDA_HOME",
                                      "KEVIN_COMPILE_TIMEOUT_S", "KEVIN_EVALUATOR", "PYTHONPATH"])
def test_the_environment_an_evaluation_reads_changes_the_address(short_tmp: Path, variable: str) -> None:
    settings = EvalSettings(cache_dir=short_tmp)
    first = daemon_address(settings, {variable: "a"}, short_tmp)
    other = daemon_address(settings, {variable: "b"}, short_tmp)
    assert first is not None and other is not None and first.key != other.key


@pytest.mark.parametrize("variable", ["OPENAI_API_KEY", "KEVIN_API_KEY", "EDITOR", "KEVIN_EVAL_DAEMON_IDLE_S"])
def test_secrets_and_unrelated_variables_do_not(short_tmp: Path, variable: str) -> None:
    settings = EvalSettings(cache_dir=short_tmp)
    first = daemon_address(settings, {variable: "1"}, short_tmp)
    other = daemon_address(settings, {variable: "2"}, short_tmp)
    assert first is not None and other is not None and first.key == other.key


def test_edited_kevin_code_and_another_repository_change_the_address(short_tmp: Path) -> None:
    package = short_tmp / "pkg"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    settings = EvalSettings(cache_dir=short_tmp / "c")
    repo_one, repo_two = short_tmp / "one", short_tmp / "two"
    for repo in (repo_one, repo_two):
        (repo / ".git").mkdir(parents=True)
    before = daemon_address(settings, {}, repo_one, package)
    (package / "a.py").write_text("x = 22\n")
    after = daemon_address(settings, {}, repo_one, package)
    elsewhere = daemon_address(settings, {}, repo_two, package)
    assert before is not None and after is not None and elsewhere is not None
    assert len({before.key, after.key, elsewhere.key}) == 3


@pytest.mark.parametrize("change", [{"compile_only": True}, {"fresh_baselines": True}, {"cluster": "auto"}])
def test_no_daemon_for_compile_only_fresh_baselines_or_a_cluster(short_tmp: Path, change: dict) -> None:
    assert daemon_address(EvalSettings(cache_dir=short_tmp, **change), {}, short_tmp) is None


def test_idle_time_zero_turns_it_off_and_a_bad_one_is_one_line(short_tmp: Path) -> None:
    assert daemon_address(EvalSettings(cache_dir=short_tmp), {"KEVIN_EVAL_DAEMON_IDLE_S": "0"}, short_tmp) is None
    assert idle_seconds({}) == 300.0
    assert idle_seconds({"KEVIN_EVAL_DAEMON_IDLE_S": "12.5"}) == 12.5
    for bad in ("-1", "soon", "inf"):
        with pytest.raises(UserInputError, match=r"^KEVIN_EVAL_DAEMON_IDLE_S=.* is not a number of seconds >= 0"):
            idle_seconds({"KEVIN_EVAL_DAEMON_IDLE_S": bad})


def test_the_folder_is_made_private_and_a_linked_one_is_refused(short_tmp: Path) -> None:
    cache = short_tmp / "c"
    (cache / "daemon").mkdir(parents=True, mode=0o777)
    os.chmod(cache / "daemon", 0o777)
    assert daemon_address(EvalSettings(cache_dir=cache), {}, short_tmp) is not None
    assert (os.stat(cache / "daemon").st_mode & 0o777) == 0o700
    linked = short_tmp / "l"
    linked.mkdir()
    (linked / "daemon").symlink_to(short_tmp / "elsewhere", target_is_directory=True)
    (short_tmp / "elsewhere").mkdir()
    assert daemon_address(EvalSettings(cache_dir=linked), {}, short_tmp) is None


def test_a_socket_path_too_long_for_the_kernel_means_no_daemon(short_tmp: Path) -> None:
    deep = short_tmp / ("d" * 90)
    assert daemon_address(EvalSettings(cache_dir=deep), {}, short_tmp) is None


def test_the_daemon_gets_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("KEVIN_API_KEY", "k-secret")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    env = daemon_environment()
    assert "OPENAI_API_KEY" not in env and "KEVIN_API_KEY" not in env and env["CUDA_VISIBLE_DEVICES"] == "0"


# -- end to end: kevin eval answered by a real warm evaluator process ----------------------------


def test_kevin_eval_is_answered_by_a_running_warm_evaluator(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    replay = short_tmp / "replay.json"
    recorded = Verdict(Stage.TIMING, True, "recorded by the warm evaluator", VerdictDetails())
    recorded.details.timing.speedup_vs_eager = 2.5
    replay.write_text(json.dumps({"default": recorded.to_dict()}))
    candidate = short_tmp / "cand.py"
    candidate.write_text(GOOD)
    cache = short_tmp / "cache"
    monkeypatch.setenv("KEVIN_EVALUATOR", f"replay:{replay}")  # the daemon's evaluator; keyed in the address
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-seen")
    monkeypatch.delenv("KEVIN_EVAL_DAEMON_IDLE_S", raising=False)
    settings = EvalSettings(cache_dir=cache)
    address = daemon_address(settings)
    assert address is not None
    pid = start_daemon(address, settings, idle_s=WAIT)
    assert pid is not None
    try:
        command = [sys.executable, "-m", "kevin_agent", "eval", str(KERNELS / "add_task.py"), str(candidate),
                   "--json", "--cache", str(cache)]
        answered = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert answered.returncode == 0, answered.stderr
        got = Verdict.from_dict(json.loads(answered.stdout))
        assert got.message == "recorded by the warm evaluator" and got.details.environment.replayed
        assert got.details.timing.speedup_vs_eager == 2.5
        assert "sk-never-seen" not in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    finally:
        assert stop_daemons(address.folder) == 1
    deadline = time.monotonic() + WAIT
    while address.socket.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not address.socket.exists()  # SIGTERM: it removed its socket on the way out


def test_address_module_reads_no_torch() -> None:
    code = ("import sys, kevin_agent.evaluate.daemon, kevin_agent.evaluate.daemon.server\n"
            "print(','.join(m for m in ('torch', 'numpy') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stderr


def test_start_tops_the_lanes_ready_workers_up_between_requests(tmp_path: Path) -> None:
    from kevin_agent.evaluate.evaluator import CudaEvaluator
    from kevin_agent.evaluate.lanes import DeviceInfo, LocalLane

    standin = [sys.executable, str(Path(__file__).parent / "workers" / "standin.py")]
    evaluator = CudaEvaluator(EvalSettings(arch="9.0", cache_dir=tmp_path), worker_command=standin,
                              devices=[DeviceInfo("stand-in", "standin-gpu-0", 0)], spares=2,
                              compiler=lambda code, cache, cancel: pytest.fail("nothing is compiled here"))
    try:
        evaluator.start()
        lane = evaluator.lanes[0]
        assert isinstance(lane, LocalLane)
        first = lane.pool.spare_pids
        assert len(first) == 2
        os.kill(first[0], 9)
        deadline = time.monotonic() + WAIT
        while first[0] in lane.pool.spare_pids and time.monotonic() < deadline:
            evaluator.start()  # the dead one is replaced once it has exited
            time.sleep(0.05)
        now = lane.pool.spare_pids
        assert len(now) == 2 and first[0] not in now and first[1] in now
    finally:
        evaluator.close()
