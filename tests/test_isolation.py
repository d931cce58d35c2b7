"""WorkerPool with real processes: stand-in workers that crash, hang, exit, leak or snoop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kevin_agent.data import Stage
from kevin_agent.errors import EnvironmentProblem
from kevin_agent.evaluate.isolation import WorkerPool
from kevin_agent.evaluate.processes import is_secret_name, scrubbed_environment
from kevin_agent.evaluate.protocol import WorkerJob

ROOT = Path(__file__).resolve().parents[1]
STANDIN = Path(__file__).parent / "workers" / "standin.py"


def make_pool(tmp_path: Path, *args: str, **kwargs) -> WorkerPool:
    kwargs.setdefault("run_timeout_s", 20.0)
    kwargs.setdefault("start_timeout_s", 20.0)
    return WorkerPool([sys.executable, str(STANDIN), *args], scratch_root=tmp_path / "scratch", **kwargs)


def job(mode: str) -> WorkerJob:
    return WorkerJob("task", mode, Path("unset"), cache_dir=Path("/nonexistent"))


def info(result) -> dict:
    return json.loads(result.verdict.message)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent counts as dead
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_normal_jobs_run_in_distinct_processes_with_scratch_dirs_removed(tmp_path: Path) -> None:
    with make_pool(tmp_path) as pool:
        results = [pool.run(job("normal")) for _ in range(3)]
        assert all(r.verdict.stage is Stage.TIMING and r.verdict.ok for r in results)
        pids = {info(r)["pid"] for r in results}
        assert len(pids) == 3 and pids == {r.pid for r in results}
        cwds = [info(r)["cwd"] for r in results]
        assert len(set(cwds)) == 3
        assert all(str(tmp_path / "scratch") in cwd for cwd in cwds)
        assert not any(Path(cwd).exists() for cwd in cwds)
        assert pool.spare_pid is not None and pool.spare_pid not in pids
        spare = pool.spare_pid
    assert not alive(spare)  # close() kills the spare


@pytest.mark.parametrize(
    "mode, reason",
    [
        ("crash", "killed by signal SIGSEGV"),
        ("abort", "killed by signal SIGABRT"),
        ("exit3", "exited with code 3"),
        ("noresult", "exited without writing a result"),
    ],
)
def test_crashes_become_load_verdicts_and_next_candidate_runs(tmp_path: Path, mode: str, reason: str) -> None:
    with make_pool(tmp_path) as pool:
        crashed = pool.run(job(mode))
        after = pool.run(job("normal"))
    assert crashed.crashed and crashed.verdict.stage is Stage.LOAD and not crashed.verdict.ok
    assert reason in crashed.verdict.message
    assert crashed.verdict.message.startswith("Your answer compiled but raised an error at run time")
    assert after.verdict.ok and after.pid != crashed.pid


def test_a_reply_written_by_the_candidate_instead_of_the_worker_counts_for_nothing(tmp_path: Path) -> None:
    """Candidate code runs in the worker's process and may write the job folder: a passing reply
    of its own (then ending the process) must not be taken. The parent draws a token per job
    that only the worker's own reply carries; the job file holding it is removed once read."""
    with make_pool(tmp_path) as pool:
        forged = pool.run(job("forge"))
        honest = pool.run(job("normal"))  # control: the same reply with the job's token is taken
    assert forged.crashed and not forged.verdict.ok and forged.verdict.stage is Stage.LOAD
    assert "did not carry this job's token" in forged.verdict.message and not forged.verdict.correct
    assert honest.verdict.ok and honest.verdict.stage is Stage.TIMING and not honest.crashed


def test_stderr_tail_reaches_the_verdict(tmp_path: Path) -> None:
    with make_pool(tmp_path) as pool:
        result = pool.run(job("abort"))
    assert "illegal memory access" in result.verdict.message
    assert "illegal memory access" in (result.verdict.details.error or "")


def test_hang_times_out_and_whole_group_dies(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    with make_pool(tmp_path, run_timeout_s=1.5, extra_env={"GRANDCHILD_PID_FILE": str(pid_file)}) as pool:
        started = time.monotonic()
        result = pool.run(job("grandchild"))
        elapsed = time.monotonic() - started
        grandchild = int(pid_file.read_text())
        assert result.verdict.stage is Stage.LOAD and "timed out after 1.5 s" in result.verdict.message
        assert 1.4 < elapsed < 300  # the limit held; the upper bound only says it did not hang
        deadline = time.monotonic() + 300  # a guard: the kill is immediate
        while alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(grandchild), "the sleeping grandchild survived the kill"
        assert not alive(result.pid)
        assert pool.run(job("normal")).verdict.ok


def test_secrets_are_not_visible_to_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "KEVIN_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY",
                 "GITHUB_PAT", "MY_SERVICE_PASSWORD", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.setenv(name, "sensitive")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with make_pool(tmp_path) as pool:
        seen = info(pool.run(job("env")))
    assert seen["visible_secrets"] == []
    assert seen["path_set"] and "CUDA_VISIBLE_DEVICES" in seen["cuda_vars"]


def test_scrubbed_environment_rules() -> None:
    env = scrubbed_environment({"PATH": "/bin", "HOME": "/h", "TORCH_CUDA_ARCH_LIST": "9.0",
                                "LD_LIBRARY_PATH": "/l", "ANTHROPIC_BASE": "x", "DB_AUTH": "y",
                                "CUDA_SECRET_TOKEN": "z", "PYTHONPATH": "/p"})
    assert set(env) == {"PATH", "HOME", "TORCH_CUDA_ARCH_LIST", "LD_LIBRARY_PATH", "PYTHONPATH",
                        "PYTHONUNBUFFERED"}
    assert is_secret_name("openai_api_key") and not is_secret_name("CUDA_HOME")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/p"]  # children import this kevin_agent


def test_workers_import_the_parents_package_from_a_plain_checkout(tmp_path: Path) -> None:
    """A checkout that is not pip-installed: the parent put it on sys.path; the child sees it too
    (not the installed copy)."""
    import shutil

    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "kevin_agent", checkout / "kevin_agent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = (f"import sys; sys.path.insert(0, {str(checkout)!r})\n"
              "from kevin_agent.evaluate.processes import scrubbed_environment\n"
              "import subprocess\n"
              "out = subprocess.run([sys.executable, '-c', 'import kevin_agent; print(kevin_agent.__file__)'],\n"
              "                     env=scrubbed_environment({'PATH': '/usr/bin:/bin'}), capture_output=True, "
              "text=True)\n"
              "print(out.stdout.strip())\n")
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)
    assert done.stdout.strip() == str(checkout / "kevin_agent" / "__init__.py"), done.stderr


def _wait_until(condition, what: str, guard_s: float = 300.0) -> None:
    """Poll ``condition``; the guard is several times what it takes on a busy machine."""
    deadline = time.monotonic() + guard_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _spare_ready(pool) -> bool:
    return bool(pool._spare_workers) and all(pool._saw_ready(w) for w in pool._spare_workers)


def test_spare_hides_start_time(tmp_path: Path) -> None:
    delay = 3.0  # each worker's start; a caller that found no ready spare waits at least this long
    with make_pool(tmp_path, "slowstart", extra_env={"START_DELAY": str(delay)}) as pool:
        pool.start_spare()
        _wait_until(lambda: _spare_ready(pool), "the spare to be ready")  # "the GPU is busy elsewhere"
        first = pool.run(job("normal"))
        _wait_until(lambda: _spare_ready(pool), "the next spare to be ready")
        second = pool.run(job("normal"))
    assert first.verdict.ok and second.verdict.ok and first.pid != second.pid
    assert first.waited_s < delay / 2 and second.waited_s < delay / 2, (first.waited_s, second.waited_s)
    assert first.startup_s is not None and first.startup_s >= delay - 0.1  # paid, but while nobody waited


def test_without_spare_start_time_is_paid(tmp_path: Path) -> None:
    with make_pool(tmp_path, "slowstart", spare=False, extra_env={"START_DELAY": "1.5"}) as pool:
        started = time.monotonic()
        result = pool.run(job("normal"))
        assert time.monotonic() - started >= 1.5
        assert pool.spare_pid is None
        assert result.waited_s >= 1.4
    assert result.verdict.ok


def test_worker_that_cannot_start_is_an_environment_problem(tmp_path: Path) -> None:
    with make_pool(tmp_path, "noready") as pool:
        with pytest.raises(EnvironmentProblem, match="no CUDA here"):
            pool.run(job("normal"))


def test_cancel_kills_running_worker(tmp_path: Path) -> None:
    cancel = threading.Event()
    with make_pool(tmp_path, run_timeout_s=60) as pool:
        timer = threading.Timer(0.8, cancel.set)
        timer.start()
        started = time.monotonic()
        result = pool.run(job("hang"), cancel=cancel)
        assert time.monotonic() - started < 50  # the hang's own limit is 60 s: cancel ended it
    assert result.cancelled and not result.verdict.ok and not alive(result.pid)


def test_last_job_of_a_batch_starts_no_spare(tmp_path: Path) -> None:
    with make_pool(tmp_path) as pool:
        first = pool.run(job("normal"), start_next=True)
        assert pool.spare_pid is not None
        second = pool.run(job("normal"), start_next=False)  # takes the spare, starts none
        assert pool.spare_pid is None
    assert first.verdict.ok and second.verdict.ok and first.pid != second.pid


def test_close_while_a_worker_is_still_starting_kills_it(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, "slowstart", spare=False, extra_env={"START_DELAY": "30"})
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.setdefault("result", pool.run(job("normal"))))
    runner.start()
    deadline = time.monotonic() + 300  # a guard: the worker is spawned at once
    while pool._running is None and time.monotonic() < deadline:  # the worker has been spawned
        time.sleep(0.05)
    starting = pool._running
    assert starting is not None
    pool.close()
    runner.join(10)
    assert not runner.is_alive()
    assert outcome["result"].cancelled and not alive(starting.pid)
