"""The run-setup form's values: defaults from the project's config, and the run request they make."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.errors import UserInputError
from kevin_agent.eval_modes import DEFAULT_POLICY, Policy
from kevin_agent.runs.request import RunRequest
from kevin_agent.runs.service import RunService


@dataclass
class SetupValues:
    """What the form shows and edits; every field is text as typed (except the backend)."""

    backend: str = "openai"
    endpoint: str = ""
    model: str = ""
    script: str = ""
    trajectories: str = "4"
    turns: str = "4"
    target_speedup: str = ""
    policy: Policy = DEFAULT_POLICY
    cluster: str = ""


def default_values(service: RunService, repo_root: Optional[Path]) -> SetupValues:
    """Defaults from [tool.kevin] / kevin.toml and the environment (as `kevin optimize` reads them)."""
    from kevin_agent.config import load_config

    config = load_config(repo_root)
    settings = service.backend_settings({}, repo_root, config)
    evaluation = service.eval_settings({}, repo_root, config=config)
    defaults = RunRequest()
    return SetupValues(
        backend=settings.backend, endpoint=settings.resolved_base_url, model=settings.model,
        script=settings.script or "", trajectories=str(defaults.trajectories),
        turns=str(defaults.turns), policy=evaluation.policy, cluster=evaluation.cluster or "",
    )


def _whole(text: str, name: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise UserInputError(f"{name} must be a whole number, not {text.strip()!r}") from None
    if value < 1:
        raise UserInputError(f"{name} must be at least 1")
    return value


def _speedup(text: str) -> Optional[float]:
    if not text.strip():
        return None
    try:
        value = float(text.strip())
    except ValueError:
        raise UserInputError(f"target speedup must be a number, not {text.strip()!r}") from None
    if value <= 0:
        raise UserInputError("target speedup must be positive")
    return value


def run_request(values: SetupValues, project: Optional[Path], target: Optional[str] = None,
                evaluator: Optional[str] = None, run_id: Optional[str] = None) -> RunRequest:
    """The run request the form describes (config and store found from ``project``, a relative
    script path taken from there); UserInputError (one line) for a bad field."""
    flags = {"backend": values.backend, "base_url": values.endpoint.strip() or None,
             "model": values.model.strip() or None, "script": None}
    if values.script.strip():
        script = Path(values.script.strip()).expanduser()
        if not script.is_absolute() and project is not None:
            script = project / script
        flags["script"] = str(script)
    return RunRequest(trajectories=_whole(values.trajectories, "trajectories"),
                      turns=_whole(values.turns, "turns"),
                      target_speedup=_speedup(values.target_speedup), backend_flags=flags,
                      eval_flags={"policy": values.policy, "cluster": values.cluster.strip() or None},
                      target=target, evaluator=evaluator, config_dir=project, run_id=run_id)
