"""``RunRequest``: what a face asks for, before settings are resolved."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kevin_agent.data import Task


@dataclass(frozen=True)
class RunRequest:
    """A new run (``target`` or ``task``) or a stored run to continue (``resume``).

    ``backend_flags`` are BackendSettings overrides (None values ignored); flags beat the
    environment, which beats the project's config file, which beats the defaults.
    """

    target: Optional[str] = None  # "FILE.py::Class", or "FILE.py" holding one module
    task: Optional[Task] = None  # a task already built (an editor buffer, unsaved edits included)
    resume: Optional[str] = None  # a stored run id ("latest" or a unique prefix)
    trajectories: int = 4
    turns: int = 4
    target_speedup: Optional[float] = None
    beam_keep: Optional[int] = None
    beam_every: int = 1
    backend_flags: Mapping[str, Any] = field(default_factory=dict)
    eval_flags: Mapping[str, Any] = field(default_factory=dict)  # policy, sandbox, cluster overrides
    evaluator: Optional[str] = None  # "cuda" | "replay:PATH"; None: $KEVIN_EVALUATOR, else cuda
    gpu_name: Optional[str] = None  # the GPU named in prompts; detected when None
    config_dir: Optional[Path] = None  # where the config file is looked up; None: from the cwd up
    run_id: Optional[str] = None  # a fixed id for a new run (tests); None: a fresh one

    @property
    def given_flags(self) -> dict[str, Any]:
        return {key: value for key, value in self.backend_flags.items() if value is not None}
