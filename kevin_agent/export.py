"""RL training data from a stored run, with Kevin's rewards (KEVIN.md, "Reward").

One sample per evaluated candidate: the prompt messages sent, the response, the score
``r = 0.3 * correct + speedup * correct``, the multi-turn return within its trajectory
(``sum``: R_t = sum_{i>=t} gamma^(i-t) r_i; ``max``: R_t = max_{i>=t} gamma^(i-t) r_i), and the
GRPO advantage: the return normalised over all of the run's samples, (R - mean) / std (0 when all
returns are equal). A verdict the evaluator does not trust (a trust check fired: work escaping
the timed stream, faster than the GPU's speed of light, an implausible speedup over eager,
provenance that could not be checked) counts as not correct: score 0, whatever its outputs; each
sample's ``flags`` names the checks that fired (``data.TRUST_FLAGS``; empty: trusted), so training
pipelines can audit them. A trajectory's future is followed through the stored parent links, so beam forks work too:
the next turn of a candidate is its child in the same trajectory, else its lowest-numbered child.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from kevin_agent import atomic
from kevin_agent.data import Message, Verdict
from kevin_agent.errors import UserInputError
from kevin_agent.run_record import RunRecord

CORRECT_BONUS = 0.3
DEFAULT_GAMMA = 0.4
AGGREGATES = ("sum", "max")


@dataclass(frozen=True)
class RLSample:
    run_id: str
    candidate_id: str
    trajectory: int
    turn: int
    prompt: list[dict[str, str]]
    response: str
    reasoning: str
    correct: bool  # passed and trusted: what the score rewards
    speedup: float
    score: float
    discounted_return: float
    advantage: float
    flags: list[str]  # the trust checks that fired (stable names); non-empty means score 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def score(verdict: Verdict) -> float:
    """Kevin's reward for one turn: 0.3 * correct + speedup * correct (0 when not trusted)."""
    if not verdict.correct or not verdict.trusted:  # correct implies trusted; said twice on purpose
        return 0.0
    return CORRECT_BONUS + verdict.speedup


def discounted_returns(rewards: Sequence[float], gamma: float, aggregate: str = "sum") -> list[float]:
    """R_t for every t of one trajectory's rewards r_0..r_{n-1}."""
    if aggregate not in AGGREGATES:
        raise UserInputError(f"--aggregate must be one of {', '.join(AGGREGATES)}")
    returns: list[float] = []
    for t in range(len(rewards)):
        terms = [gamma ** (i - t) * rewards[i] for i in range(t, len(rewards))]
        returns.append(sum(terms) if aggregate == "sum" else max(terms))
    return returns


def grpo_advantages(returns: Sequence[float]) -> list[float]:
    """(R - mean) / std over all samples (population std); all 0 when std is 0."""
    if not returns:
        return []
    mean = sum(returns) / len(returns)
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns))
    if std < 1e-12:
        return [0.0 for _ in returns]
    return [(r - mean) / std for r in returns]


def _children(record: RunRecord, evaluated: dict[str, Verdict]) -> dict[str, list[tuple[int, str]]]:
    """Evaluated candidates by the candidate whose history they continue."""
    trajectory_of = {c.id: c.trajectory for c, _ in record.candidates}
    children: dict[str, list[tuple[int, str]]] = {}
    for child, parent in record.parents.items():
        if parent is not None and child in evaluated:
            children.setdefault(parent, []).append((trajectory_of[child], child))
    return children


def _future_chain(
    start: str, trajectory: int, children: dict[str, list[tuple[int, str]]]
) -> list[str]:
    """``start`` and the candidates that continue it: the child in the same trajectory, else the
    lowest-numbered child."""
    chain = [start]
    while chain[-1] in children:
        options = children[chain[-1]]
        same = [cid for t, cid in options if t == trajectory]
        trajectory, chosen = (trajectory, same[0]) if same else min(options)
        chain.append(chosen)
    return chain


def rl_samples(
    record: RunRecord,
    messages: dict[str, list[Message]],
    gamma: float = DEFAULT_GAMMA,
    aggregate: str = "sum",
) -> list[RLSample]:
    """The run's samples in (turn, trajectory) order; candidates still in flight are left out."""
    if not 0.0 <= gamma <= 1.0:
        raise UserInputError(f"--gamma must be between 0 and 1, got {gamma}")
    if aggregate not in AGGREGATES:
        raise UserInputError(f"--aggregate must be one of {', '.join(AGGREGATES)}")
    evaluated = {c.id: v for c, v in record.candidates if v is not None}
    rewards = {cid: score(v) for cid, v in evaluated.items()}
    rows = [(c, v) for c, v in record.candidates if v is not None]
    children = _children(record, evaluated)
    returns: list[float] = []
    for candidate, _ in rows:
        chain = _future_chain(candidate.id, candidate.trajectory, children)
        returns.append(discounted_returns([rewards[cid] for cid in chain], gamma, aggregate)[0])
    advantages = grpo_advantages(returns)
    samples = []
    for (candidate, verdict), ret, adv in zip(rows, returns, advantages):
        prompt = [{"role": m.role, "content": m.content} for m in messages.get(candidate.id, [])]
        samples.append(RLSample(
            run_id=record.run_id, candidate_id=candidate.id, trajectory=candidate.trajectory,
            turn=candidate.turn, prompt=prompt, response=candidate.response,
            reasoning=candidate.reasoning, correct=verdict.correct,
            speedup=verdict.speedup, score=rewards[candidate.id], discounted_return=ret, advantage=adv,
            flags=[flag.name for flag in verdict.trust_flags],
        ))
    return samples


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never half-written."""
    path = Path(path)
    if path.parent and not path.parent.is_dir():
        raise UserInputError(f"cannot write {path}: folder {path.parent} does not exist")
    if path.is_dir():
        raise UserInputError(f"cannot write {path}: it is a folder; name a file, e.g. {path / 'samples.jsonl'}")
    try:
        atomic.write_text_atomically(path, text)
    except OSError as err:
        raise UserInputError(f"cannot write {path}: {err.strerror or err}") from None


def samples_jsonl(samples: Sequence[RLSample]) -> str:
    return "".join(json.dumps(s.to_dict()) + "\n" for s in samples)


def export_rl(
    record: RunRecord,
    messages: dict[str, list[Message]],
    out: Optional[Path],
    gamma: float = DEFAULT_GAMMA,
    aggregate: str = "sum",
) -> tuple[list[RLSample], str]:
    """Build the samples and write them to ``out`` (returns the JSONL text too)."""
    samples = rl_samples(record, messages, gamma, aggregate)
    if not samples:
        raise UserInputError(f"run {record.run_id} has no evaluated candidates to export yet")
    text = samples_jsonl(samples)
    if out is not None:
        write_text_atomically(out, text)
    return samples, text
