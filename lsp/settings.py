"""Editor settings (initializationOptions / workspace configuration section "kevin"), validated.

A bad value never stops the server: it is named in one message and its default is used. The
endpoint's setting is ``baseUrl`` (the CLI's ``--base-url``, the config's ``base_url``); the old
name ``endpoint`` is still read, with a note saying to rename it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from kevin_agent.config import BACKEND_NAMES
from kevin_agent.eval_modes import Policy, SandboxMode, parse_policy, parse_sandbox_mode

SECTION = "kevin"
MAX_TRAJECTORIES = 64
MAX_TURNS = 32


@dataclass(frozen=True)
class LspSettings:
    """What a run started from the editor uses; None: the project config / environment decides."""

    backend: Optional[str] = None  # "openai" | "vllm" | "scripted"
    base_url: Optional[str] = None  # OpenAI-compatible base URL, e.g. http://localhost:8000/v1
    model: Optional[str] = None
    script: Optional[str] = None  # scripted backend: file of recorded responses (tests, demos)
    trajectories: int = 4
    turns: int = 4
    policy: Optional[Policy] = None
    sandbox: Optional[SandboxMode] = None
    cluster: Optional[str] = None  # "auto" | "ray://HEAD:10001"

    def backend_flags(self) -> dict[str, Any]:
        """The BackendSettings overrides these settings make (None: not set)."""
        return {"backend": self.backend, "base_url": self.base_url, "model": self.model,
                "script": self.script}

    def eval_flags(self) -> dict[str, Any]:
        """The evaluation overrides these settings make (None: not set)."""
        return {"policy": self.policy, "sandbox": self.sandbox, "cluster": self.cluster}


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value.strip()


def _count(limit: int):
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise ValueError("expected a whole number")
        if not 1 <= int(value) <= limit:
            raise ValueError(f"expected 1 to {limit}")
        return int(value)

    return check


def _backend(value: Any) -> str:
    text = _text(value)
    if text not in BACKEND_NAMES:
        raise ValueError(f"expected one of {', '.join(BACKEND_NAMES)}")
    return text


def _cluster(value: Any) -> str:
    text = _text(value)
    if text != "auto" and not text.startswith("ray://"):
        raise ValueError("expected 'auto' or ray://HEAD:PORT")
    return text


def _endpoint(value: Any) -> str:
    text = _text(value)
    if not text.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    return text


DEPRECATED = {"endpoint": "baseUrl"}  # old setting name -> its name now (read when the new one is unset)
_FIELDS = {"baseUrl": "base_url"}  # setting name -> LspSettings field, where they differ
_CHECKS = {
    "backend": _backend,
    "baseUrl": _endpoint,
    "model": _text,
    "script": _text,
    "trajectories": _count(MAX_TRAJECTORIES),
    "turns": _count(MAX_TURNS),
    "policy": lambda value: parse_policy(_text(value)),
    "sandbox": lambda value: parse_sandbox_mode(_text(value)),
    "cluster": _cluster,
}


def section_of(raw: Any) -> Mapping[str, Any]:
    """The "kevin" table of raw options (nested or flat); {} for anything else."""
    if not isinstance(raw, Mapping):
        return {}
    nested = raw.get(SECTION)
    return nested if isinstance(nested, Mapping) else raw


def parse_settings(raw: Any, base: LspSettings = LspSettings()) -> tuple[LspSettings, list[str]]:
    """Settings from raw options over ``base``; problems as short phrases (their defaults kept)."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    section = section_of(raw)
    for written, value in section.items():
        key = DEPRECATED.get(written, written)
        check = _CHECKS.get(key)
        if check is None or value is None or (key != written and section.get(key) is not None):
            continue  # other keys belong to the editor; a new name set beats its old one
        try:
            values[_FIELDS.get(key, key)] = check(value)
        except (ValueError, TypeError) as err:
            problems.append(f"{SECTION}.{written} = {value!r} ({err})")
    return dataclasses.replace(base, **values), problems


def deprecation_notes(raw: Any) -> list[str]:
    """One note per deprecated setting name in use."""
    section = section_of(raw)
    return [f"{SECTION}.{old} is deprecated: rename it {SECTION}.{new} (as the CLI's --base-url and the "
            "config's base_url)" for old, new in DEPRECATED.items() if section.get(old) is not None]


def problems_message(problems: list[str]) -> str:
    """The one message naming every bad setting."""
    return f"Kevin: ignoring bad settings, using defaults: {'; '.join(problems)}"
