"""CudaEvaluator: static stage, real nvcc compile stage, GPU stage through stand-in workers."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from kevin_agent.data import Stage, Task, Verdict
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.evaluator import CudaEvaluator
from kevin_agent.evaluate.lanes import DeviceInfo

KERNELS = Path(__file__).parent / "fixtures" / "kernels"
GOOD = (KERNELS / "add_candidate.py").read_text()
TASK = Task(source=(KERNELS / "add_task.py").read_text(), class_name="Model")
HACK = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
        "        return a + b\n")
BROKEN = GOOD.replace("out[idx] = a[idx] + b[idx];", "out[idx] = a[idx] + b_undeclared[idx];").replace(
    "kevin_fixture_elementwise_add", "kevin_test_broken_add")
STANDIN = [sys.executable, str(Path(__file__).parent / "workers" / "standin.py")]
FAKE_GPU = [DeviceInfo("stand-in", "standin-gpu-0", 0)]


class Recorder:
    def __init__(self) -> None:
        self.verdicts: list[tuple[int, Verdict]] = []
        self.queue: list[tuple[int, int]] = []

    def on_verdict(self, index: int, verdict: Verdict) -> None:
        self.verdicts.append((index, verdict))

    def on_queue(self, compiling: int, timing: int) -> None:
        self.queue.append((compiling, timing))


def test_static_failures_never_reach_the_compiler() -> None:
    rec = Recorder()
    evaluator = CudaEvaluator(EvalSettings(compile_only=True, arch="9.0"))
    verdicts = evaluator.evaluate(TASK, [HACK, HACK.replace("a + b", "a.add(b)")],
                                  on_verdict=rec.on_verdict, on_queue=rec.on_queue)
    assert [v.stage for v in verdicts] == [Stage.STATIC, Stage.STATIC]
    assert all(not v.ok and v.details.static_rule for v in verdicts)
    assert verdicts[0].message.startswith("Your answer was rejected by the static checks")
    assert [i for i, _ in rec.verdicts] == [0, 1]
    assert rec.queue == []  # nothing waited to compile


@pytest.fixture(scope="module")
def compiled(shared_build_cache: Path) -> tuple[list[Verdict], Recorder]:
    """One compile-only batch: the good fixture and a broken copy (real nvcc, shared cache)."""
    rec = Recorder()
    evaluator = CudaEvaluator(EvalSettings(compile_only=True, arch="9.0", cache_dir=shared_build_cache))
    verdicts = evaluator.evaluate(TASK, [GOOD, BROKEN, HACK], on_verdict=rec.on_verdict, on_queue=rec.on_queue)
    return verdicts, rec


@pytest.mark.nvcc
@pytest.mark.timeout(1800)  # a cold compile on a busy 2-core CI machine
def test_compile_only_batch(compiled: tuple[list[Verdict], Recorder]) -> None:
    verdicts, rec = compiled
    good, broken, hack = verdicts
    assert good.stage is Stage.COMPILE and good.ok and good.message == "Your answer compiled; it was not run."
    assert good.details.build.seconds is not None and good.details.build.path in ("split", "whole")
    assert good.details.build.log_path
    assert broken.stage is Stage.COMPILE and not broken.ok
    assert broken.message.startswith("Your answer failed to compile")
    assert "b_undeclared" in broken.message and broken.details.build.compiler_errors
    assert hack.stage is Stage.STATIC
    assert rec.queue[0] == (2, 0)  # two survivors of the static checks waited to compile
    assert sorted(i for i, _ in rec.verdicts) == [0, 1, 2]


@pytest.mark.nvcc
@pytest.mark.timeout(1800)  # a cold compile on a busy 2-core CI machine
def test_gpu_stage_through_standin_workers(compiled: tuple, shared_build_cache: Path) -> None:
    rec = Recorder()
    settings = EvalSettings(arch="9.0", cache_dir=shared_build_cache, run_timeout_s=30)
    codes = [GOOD + "\n# standin: crash\n", HACK, GOOD + "\n# standin: normal\n", BROKEN]
    with CudaEvaluator(settings, worker_command=STANDIN, devices=FAKE_GPU) as evaluator:
        verdicts = evaluator.evaluate(TASK, codes, on_verdict=rec.on_verdict, on_queue=rec.on_queue)
        pids = [r.pid for r in evaluator.last_worker_results]
    crash, hack, normal, broken = verdicts
    assert crash.stage is Stage.LOAD and "killed by signal SIGSEGV" in crash.message
    assert hack.stage is Stage.STATIC and broken.stage is Stage.COMPILE and not broken.ok
    assert normal.stage is Stage.TIMING and normal.ok and normal.details.environment.gpu_name == "stand-in"
    assert normal.details.build.cache_hit is True and normal.details.build.seconds is not None  # merged build info
    seen = json.loads(normal.message)  # the stand-in echoes its job
    assert seen["arch"] == "9.0" and seen["cache_dir"] == str(shared_build_cache)
    assert len(set(pids)) == 2
    assert normal.details.timing.baseline_cached is not None  # the parent says whether it measured them
    assert rec.queue[0] == (3, 0) and rec.queue[-1] == (0, 0)  # three compiled, all went through
    assert all(c + g <= 3 for c, g in rec.queue) and max(g for _, g in rec.queue) >= 1
    assert rec.verdicts[0][0] == 1 and sorted(i for i, _ in rec.verdicts) == [0, 1, 2, 3]


@pytest.mark.nvcc
@pytest.mark.timeout(1800)  # a cold compile on a busy 2-core CI machine
def test_cancel_kills_the_running_worker(compiled: tuple, shared_build_cache: Path) -> None:
    cancel = threading.Event()
    rec = Recorder()

    def on_queue(compiling: int, timing: int) -> None:
        rec.on_queue(compiling, timing)
        if timing == 2 and not cancel.is_set():
            threading.Timer(0.5, cancel.set).start()

    settings = EvalSettings(arch="9.0", cache_dir=shared_build_cache, run_timeout_s=120)
    with CudaEvaluator(settings, worker_command=STANDIN, devices=FAKE_GPU) as evaluator:
        started = time.monotonic()
        verdicts = evaluator.evaluate(TASK, [GOOD + "\n# standin: hang\n", GOOD + "\n# standin: hang\n\n"],
                                      on_verdict=rec.on_verdict, on_queue=on_queue, cancel=cancel)
        elapsed = time.monotonic() - started
    assert elapsed < 60
    assert rec.verdicts == []
    assert [v.details.error for v in verdicts] == ["cancelled", "cancelled"]
    assert all(v.stage is Stage.COMPILE and not v.ok for v in verdicts)


def test_static_checks_know_the_task_classes() -> None:
    """The evaluator passes the task source on: a ModelNew that inherits a task class's forward
    (here a copy of the task's helper class) is rejected, while the same code inheriting a
    helper of its own is not. Subclassing alone is only a hint (provenance decides)."""
    from kevin_agent.evaluate.static.checks import hints_for
    from kevin_agent.evaluate.verdicts import static_verdict

    helper = "class Block(nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
    task_source = TASK.source + "\n" + helper
    code = GOOD.replace("class ModelNew(nn.Module)", helper + "\nclass ModelNew(Block)")
    code = code[:code.index("class ModelNew(Block)")] + "class ModelNew(Block):\n    pass\n"
    verdict = static_verdict(code, task_source)
    assert verdict is not None and verdict.details.static_rule == "empty-forward"
    assert "line " in verdict.message and "[empty-forward]" in verdict.message
    assert static_verdict(code, TASK.source) is None
    assert any(v.rule == "subclass-reference" and "Block" in v.message for v in hints_for(
        GOOD.replace("class ModelNew(nn.Module)", helper + "\nclass ModelNew(Block)"), task_source))
