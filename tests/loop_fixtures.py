"""Shared material for the loop tests: a real task, model replies built on a real CUDA candidate,
and replay-evaluator verdict files keyed by markers in the code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from kevin_agent import feedback
from kevin_agent.data import Candidate, Message, Stage, Task, TimingStats, Verdict, VerdictDetails
from kevin_agent.store import RunStore
from kevin_agent.verdict_records import BuildRecord, CorrectnessRecord, TimingRecord, TrustRecord

FIXTURES = Path(__file__).parent / "fixtures" / "kernels"
TASK_FILE = FIXTURES / "add_task.py"
CANDIDATE_CODE = (FIXTURES / "add_candidate.py").read_text()
EAGER_MS = 1.2
COMPILE_MS = 0.8  # torch.compile reference: eager / compile = 1.5x


def reply(marker: str, summary: Optional[str] = None) -> str:
    """A QwQ-style reply: reasoning, one python block defining ModelNew (tagged), a summary."""
    code = CANDIDATE_CODE.rstrip("\n") + f"\n# kevin-test: {marker}\n"
    return (f"<think>\nLet me fuse the add ({marker}).\n</think>\n\n```python\n{code}```\n\n"
            f"{summary or f'Summary of attempt {marker}.'}")


def timed(speedup: float, suspicious: bool = False) -> dict[str, Any]:
    kernel_ms = EAGER_MS / speedup
    stats = lambda ms: TimingStats(ms, ms, ms, ms, 0.0, 100)  # noqa: E731
    details = VerdictDetails(
        correctness=CorrectnessRecord(trials_passed=5, trials_total=5),
        timing=TimingRecord(
            eager=stats(EAGER_MS),
            compiled=stats(COMPILE_MS),
            kernel=stats(kernel_ms),
            speedup_vs_eager=speedup,
            speedup_vs_compile=COMPILE_MS / kernel_ms,
            sol_fraction=0.5,
        ),
        trust=TrustRecord(suspicious=suspicious, reasons=["faster than the speed of light"] if suspicious else []),
    )
    return Verdict(Stage.TIMING, True, feedback.correct(speedup), details).to_dict()


VERDICTS: dict[str, dict[str, Any]] = {
    "slow": timed(0.8),
    "modest": timed(1.2),  # beats eager, loses to torch.compile (1.5x)
    "quick": timed(2.0),
    "fastest": timed(3.0),
    "hack": timed(40.0, suspicious=True),
    "wrong": Verdict(Stage.CORRECTNESS, False, feedback.incorrect("max abs error 0.5 > atol"),
                     VerdictDetails(correctness=CorrectnessRecord(trials_passed=0, trials_total=5,
                                                                  max_abs_error=0.5))).to_dict(),
    "broken": Verdict(Stage.COMPILE, False, feedback.compile_error("kernel.cu(3): error: bad"),
                      VerdictDetails(build=BuildRecord(compiler_errors="kernel.cu(3): error: bad"))).to_dict(),
}


def write_replay(path: Path, delay_s: float = 0.0) -> Path:
    path.write_text(json.dumps({"by_marker": {f"# kevin-test: {m}": v for m, v in VERDICTS.items()},
                                "delay_s": delay_s}))
    return path


def write_script(path: Path, plan: dict[tuple[int, int], str]) -> Path:
    """plan: (trajectory, turn) -> marker, or a raw reply text when it starts with '!'."""
    responses = []
    for (trajectory, turn), marker in plan.items():
        text = marker[1:] if marker.startswith("!") else reply(marker)
        responses.append({"trajectory": trajectory, "turn": turn, "text": text})
    path.write_text(json.dumps({"responses": responses}))
    return path


STORED_TASK = Task(source="class Model: ...\n", class_name="Model")

# trajectory -> markers per turn; scores: wrong 0, broken 0, slow 0.3+0.8, quick 0.3+2.0,
# hack (matched, but flagged as faster than the speed of light: not trusted, earns nothing) 0
PLAN = {0: ["wrong", "slow", "quick"], 1: ["broken", "hack", "wrong"]}


def stored_run(root: Path, plan=PLAN, parents=None, run_id="run-1") -> RunStore:
    store = RunStore.for_path(root)
    store.create_run(run_id, STORED_TASK, {"trajectories": len(plan), "turns": 3})
    for turn in range(3):
        for trajectory, markers in plan.items():
            cid = f"t{trajectory}.{turn}"
            parent = (parents or {}).get(cid, f"t{trajectory}.{turn - 1}" if turn else None)
            candidate = Candidate(trajectory, turn, id=cid, response=f"answer {cid}",
                                  reasoning="thinking", code="code")
            store.add_candidate(run_id, candidate, [Message("user", f"prompt for {cid}")], parent)
            store.add_verdict(run_id, cid, Verdict.from_dict(VERDICTS[markers[turn]]))
    return store


def with_verdicts(candidates: list[tuple[Candidate, Optional[Verdict]]]) -> list[tuple[Candidate, Verdict]]:
    """A run's candidates with their verdicts; a candidate never judged fails the test."""
    assert all(v is not None for _, v in candidates), [c.id for c, v in candidates if v is None]
    return [(c, v) for c, v in candidates if v is not None]
