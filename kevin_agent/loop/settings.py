"""``RunSettings``: the shape of one run (trajectories x turns, early stop, beam), stored as JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.api import EvalSettings

if TYPE_CHECKING:  # config is imported lazily: it may pull in optional dependencies
    from kevin_agent.config import BackendSettings

SECRET_FIELDS = ("api_key",)  # never written to the store


def _backend_settings_class() -> type:
    from kevin_agent.config import BackendSettings

    return BackendSettings


def _default_backend_settings() -> BackendSettings:
    return _backend_settings_class()()


@dataclass
class RunSettings:
    """Everything that decides what a run does; stored with the run so it can be resumed."""

    trajectories: int = 4
    turns: int = 4
    target_speedup: Optional[float] = None  # early stop once the best speedup reaches this
    beam_keep: Optional[int] = None  # beam mode: keep the best k trajectories, fork each
    beam_every: int = 1  # turns between beam selections (KEVIN.md's blog beam: 4)
    backend: BackendSettings = field(default_factory=_default_backend_settings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    gpu_name: Optional[str] = None  # the target GPU named in prompts; detected when None
    evaluator: Optional[str] = None  # evaluate.evaluator.make_evaluator spec ("replay:PATH"), for resume

    def validate(self) -> None:
        """UserInputError naming the setting that cannot work."""
        if self.trajectories < 1:
            raise UserInputError("--trajectories must be at least 1")
        if self.turns < 1:
            raise UserInputError("--turns must be at least 1")
        if self.target_speedup is not None and self.target_speedup <= 0:
            raise UserInputError("--target-speedup must be positive")
        if self.beam_every < 1:
            raise UserInputError("the beam interval must be at least 1 turn")
        if self.beam_keep is not None:
            if not 1 <= self.beam_keep <= self.trajectories:
                raise UserInputError(
                    f"--beam {self.beam_keep} must be between 1 and --trajectories "
                    f"({self.trajectories})"
                )
            if self.trajectories % self.beam_keep:
                raise UserInputError(
                    f"--beam {self.beam_keep} must divide --trajectories ({self.trajectories}) "
                    "so each kept trajectory forks into the same number of copies"
                )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, without secrets (API keys never reach the store)."""
        backend = dataclasses.asdict(self.backend)
        for name in SECRET_FIELDS:
            backend.pop(name, None)
        eval_settings = self.eval.to_dict()
        return {
            "trajectories": self.trajectories,
            "turns": self.turns,
            "target_speedup": self.target_speedup,
            "beam_keep": self.beam_keep,
            "beam_every": self.beam_every,
            "backend": backend,
            "eval": eval_settings,
            "gpu_name": self.gpu_name,
            "evaluator": self.evaluator,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunSettings:
        backend_cls = _backend_settings_class()
        backend_names = {f.name for f in dataclasses.fields(backend_cls)}
        try:  # a store written by a newer kevin may hold settings this one does not know
            eval_settings = EvalSettings.from_dict(raw.get("eval") or {}, unknown="ignore")
        except ValueError as err:  # an unknown policy or sandbox mode (a hand-edited store)
            raise UserInputError(f"the run's stored evaluation settings: {err}") from None
        return cls(
            trajectories=int(raw.get("trajectories", 4)),
            turns=int(raw.get("turns", 4)),
            target_speedup=raw.get("target_speedup"),
            beam_keep=raw.get("beam_keep"),
            beam_every=int(raw.get("beam_every", 1)),
            backend=backend_cls(
                **{k: v for k, v in (raw.get("backend") or {}).items() if k in backend_names}
            ),
            eval=eval_settings,
            gpu_name=raw.get("gpu_name"),
            evaluator=raw.get("evaluator"),
        )
