"""The parent's side of the judge outside the candidate's process (issue 19, docs/eval.md).

The worker runs the candidate and checks it in-process (early feedback); it also writes every
checked call's outputs to a witness file (``judge_wire``). After the worker has ended, a judge
process (``evaluate.judge``, started beside the worker before any candidate code existed) makes
the same inputs from the same seeds, runs the reference it loaded itself and compares, with its
own tolerances; its report comes back over its own stdout pipe, which candidate code cannot
reach. A verdict that passed counts only when the judge confirms every checked call: no report,
a report that does not cover the calls the settings demand, or any problem in it, is a failure.
Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from kevin_agent import feedback
from kevin_agent.data import Stage, Verdict
from kevin_agent.evaluate.observe.report import Observation, observed_verdict

REPORT_LIMIT_BYTES = 1024 * 1024
# the judge's own clock, per phase, summed over calls (recorded as ``stage_seconds["judge_<phase>"]``)
JUDGE_PHASES = ("load", "read", "inputs", "compare", "observe")
RUNS_PER_TRIAL = 2  # a correctness trial calls the candidate twice (first run, then again)
JUDGED_ELSEWHERE = "judged outside your process"


def trial_seed(base_seed: int, trial: int) -> int:
    """A different seed per correctness trial (never the construction seed)."""
    return base_seed + 1 + trial


@dataclass
class CheckedCall:
    """One candidate call the judge compared with its own reference run."""

    seed: int
    label: str
    problem: Optional[str] = None


@dataclass
class JudgeReport:
    """What the judge process found; ``error``: why it could not judge (the witness, the task)."""

    checked: list[CheckedCall] = field(default_factory=list)
    error: Optional[str] = None
    seconds: dict[str, float] = field(default_factory=dict)  # where its time went (``JUDGE_PHASES``)
    observation: Optional[Observation] = None  # the worker's calls run and read from outside (``observe``)

    def to_json(self) -> str:
        return json.dumps({"checked": [dataclasses.asdict(c) for c in self.checked], "error": self.error,
                           "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
                           "observation": self.observation.to_dict() if self.observation else None})

    @classmethod
    def parse(cls, text: str) -> Optional[JudgeReport]:
        """The report in ``text`` (its last line that parses), or None."""
        for line in reversed(text.strip().splitlines()):
            try:
                raw = json.loads(line)
                checked = [CheckedCall(int(c["seed"]), str(c["label"]),
                                       None if c.get("problem") is None else str(c["problem"]))
                           for c in raw.get("checked") or []]
            except (ValueError, TypeError, KeyError, AttributeError):
                continue
            error = raw.get("error")
            seconds = raw.get("seconds") if isinstance(raw.get("seconds"), dict) else {}
            timed = {k: float(v) for k, v in seconds.items() if k in JUDGE_PHASES and type(v) in (int, float)}
            observation = Observation.from_dict(raw.get("observation"))
            return cls(checked, None if error is None else str(error), timed, observation)
        return None


def needs_judge(verdict: Verdict) -> bool:
    """Only a verdict that passed has something to lose: a failure stands as the worker found it."""
    return verdict.passed


def expected_seeds(base_seed: int, trials: int) -> list[int]:
    return [trial_seed(base_seed, t) for t in range(max(1, trials))]


def missing_calls(report: JudgeReport, base_seed: int, trials: int, timed: bool) -> list[str]:
    """What the report should cover and does not: two runs per correctness trial, and at least
    one timed call's output when the verdict went through timing."""
    seen = Counter(c.seed for c in report.checked)
    wanted = expected_seeds(base_seed, trials)
    missing = [f"trial {i + 1} ({seen[s]} of {RUNS_PER_TRIAL} runs)" for i, s in enumerate(wanted)
               if seen[s] < RUNS_PER_TRIAL]
    if timed and not any(c.seed not in wanted for c in report.checked):
        missing.append("the sampled timed calls (none)")
    return missing


def judged_verdict(verdict: Verdict, report: Optional[JudgeReport], base_seed: int, trials: int,
                   why_absent: str = "it did not report", observed: bool = False,
                   compile_ratio: Optional[float] = None) -> Verdict:
    """``verdict`` as the judge leaves it: unchanged when it failed already or the judge confirms
    every checked call; else a correctness failure that says what the judge found or lacked.
    ``observed``: the judge also ran and read the worker's calls itself, and its observation
    decides correctness and time (``observe.report.observed_verdict``)."""
    if not needs_judge(verdict):
        return verdict
    d = dataclasses.replace(verdict.details)
    if report is None or report.error:
        why = why_absent if report is None else report.error
        text = (f"the judge outside your process could not check your outputs ({why}); a result it "
                "cannot confirm earns nothing")
        d.error = text
        return Verdict(Stage.CORRECTNESS, False, feedback.incorrect(text), d)
    problems = [f"{c.problem} ({JUDGED_ELSEWHERE})" for c in report.checked if c.problem]
    if problems:
        d.error = "\n".join(problems)
        return Verdict(Stage.CORRECTNESS, False, feedback.incorrect(problems[0]), d)
    missing = missing_calls(report, base_seed, trials, timed=verdict.stage == Stage.TIMING and verdict.ok)
    if missing:
        text = (f"the judge outside your process did not receive the outputs of {', '.join(missing)}; "
                "a result it cannot confirm earns nothing")
        d.error = text
        return Verdict(Stage.CORRECTNESS, False, feedback.incorrect(text), d)
    d.correctness = dataclasses.replace(d.correctness, judged_calls=len(report.checked))
    d.environment.stage_seconds.update({f"judge_{phase}": s for phase, s in report.seconds.items()})
    witnessed = dataclasses.replace(verdict, details=d)
    return observed_verdict(witnessed, report.observation, compile_ratio) if observed else witnessed
