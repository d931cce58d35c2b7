"""The run-setup form's values: defaults from the project's config, and their RunSettings."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from kevin_agent.errors import UserInputError
from kevin_agent.loop.settings import RunSettings


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


def default_values(repo_root: Optional[Path], env: Mapping[str, str] | None = None) -> SetupValues:
    """Defaults from [tool.kevin] / kevin.toml and the environment (as `kevin optimize` reads them)."""
    from kevin_agent.config import load_config, resolve_backend_settings

    settings = resolve_backend_settings({}, os.environ if env is None else env, load_config(repo_root))
    defaults = RunSettings()
    return SetupValues(
        backend=settings.backend, endpoint=settings.resolved_base_url, model=settings.model,
        script=settings.script or "", trajectories=str(defaults.trajectories),
        turns=str(defaults.turns),
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


def run_settings(values: SetupValues, repo_root: Optional[Path],
                 env: Mapping[str, str] | None = None, evaluator: Optional[str] = None) -> RunSettings:
    """The RunSettings the form describes; UserInputError (one line) for a bad field."""
    from kevin_agent.config import load_config, resolve_backend_settings

    flags = {"backend": values.backend, "base_url": values.endpoint.strip() or None,
             "model": values.model.strip() or None, "script": None}
    if values.script.strip():
        script = Path(values.script.strip()).expanduser()
        if not script.is_absolute() and repo_root is not None:
            script = repo_root / script
        flags["script"] = str(script)
    backend = resolve_backend_settings(flags, os.environ if env is None else env,
                                       load_config(repo_root))
    settings = RunSettings(trajectories=_whole(values.trajectories, "trajectories"),
                           turns=_whole(values.turns, "turns"),
                           target_speedup=_speedup(values.target_speedup),
                           backend=backend, evaluator=evaluator)
    settings.validate()
    return settings
