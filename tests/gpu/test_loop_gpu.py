"""On a GPU: the Kevin loop end to end with the real evaluator (issue 3's scenario).

One trajectory, four turns, scripted model replies built from the fused-GELU fixture:
turn 0 correct but slow, turn 1 a compile error, turn 2 incorrect, turn 3 the fast kernel.
The best must be turn 3's, and each turn's feedback must say what really happened.

The evaluator shares the session's build cache (``gpu_cache_dir``: the torch header and the
compilable turns are built there in parallel with the other GPU tests' candidates), so the loop
spends its time on what it proves: the evaluator's stages, the turns' feedback, the best choice.
Measured on the H200: alone with a cold cache of its own, ~110 s (45 s until the first turn's
build was done: the torch header, ~30 s, then the build; each later turn ~10 s of compiling, one
at a time; the end-of-run baseline re-measure 16 s); with the shared cache, 44 s.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from gpu_helpers import loop_variants

from kevin_agent.backends.scripted import ScriptedBackend
from kevin_agent.config import BackendSettings
from kevin_agent.data import Stage
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.evaluator import CudaEvaluator
from kevin_agent.loop.session import Session
from kevin_agent.loop.settings import RunSettings
from kevin_agent.store import RunStore
from kevin_agent.task import load_task

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"
VARIANTS = loop_variants()
FAST, SLOW, BROKEN, WRONG = (VARIANTS[k] for k in ("fast", "slow", "broken", "wrong"))


def _reply(code: str, summary: str) -> str:
    return f"<think>\nPlan the kernel.\n</think>\n\n```python\n{code}```\n\n{summary}"


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_loop_with_real_evaluator(tmp_path: Path, gpu_cache_dir: Path) -> None:
    assert SLOW != FAST and BROKEN != FAST and WRONG != FAST
    script = [
        {"trajectory": 0, "turn": 0, "text": _reply(SLOW, "One block, grid-stride loop.")},
        {"trajectory": 0, "turn": 1, "text": _reply(BROKEN, "Tried to vectorise.")},
        {"trajectory": 0, "turn": 2, "text": _reply(WRONG, "Simplified the formula.")},
        {"trajectory": 0, "turn": 3, "text": _reply(FAST, "Full grid, fused tanh-GELU.")},
    ]
    task = load_task(str(KERNELS / "gelu_task.py"))
    settings = RunSettings(
        trajectories=1, turns=4,
        backend=BackendSettings(backend="scripted", script="inline"),
        eval=EvalSettings(timing_trials=30, warmup_trials=3, cache_dir=gpu_cache_dir),
    )
    evaluator = CudaEvaluator(settings.eval)
    store = RunStore.for_path(tmp_path)
    try:
        record = Session(task, settings, ScriptedBackend(script), evaluator, store).run(threading.Event())
    finally:
        evaluator.close()

    verdicts = [verdict for _, verdict in sorted(record.candidates, key=lambda cv: cv[0].turn) if verdict]
    assert len(verdicts) == len(record.candidates) == 4
    assert [v.stage for v in verdicts] == [Stage.TIMING, Stage.COMPILE, Stage.CORRECTNESS, Stage.TIMING]
    assert [v.ok for v in verdicts] == [True, False, False, True]
    slow, broken, wrong, fast = verdicts
    assert "correct" in slow.message and "speedup" in slow.message
    assert "failed to compile" in broken.message and "error" in broken.message
    assert "incorrect" in wrong.message
    assert fast.details.timing.speedup_vs_eager and slow.details.timing.speedup_vs_eager
    assert fast.details.timing.speedup_vs_eager > 5 * slow.details.timing.speedup_vs_eager
    best = record.best()
    assert best is not None
    best_candidate, best_verdict = best
    assert best_candidate.turn == 3
    assert best_verdict.details.timing.speedup_vs_eager == fast.details.timing.speedup_vs_eager

    # Each refinement prompt carries the previous turns' real feedback.
    messages = store.load_messages(record.run_id)
    last_prompt = messages[best_candidate.id][-1].content
    for earlier in (slow, broken, wrong):
        assert earlier.message.splitlines()[0] in last_prompt
