"""Backend settings and the project's config file (``[tool.kevin]`` in pyproject.toml or kevin.toml).

Resolution order for every setting: command-line flags > environment > config file > defaults.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kevin_agent.errors import UserInputError
from kevin_agent.eval_modes import parse_policy, parse_sandbox_mode

DEFAULT_BASE_URL = "http://localhost:8000/v1"  # where backends.serve.SERVE_COMMAND listens
DEFAULT_MODEL = "cognition-ai/Kevin-32B"
BACKEND_NAMES = ("openai", "vllm", "scripted")

# environment variable -> evaluation setting (EvalSettings field)
EVAL_ENV_VARS: tuple[tuple[str, str], ...] = (
    ("KEVIN_POLICY", "policy"),
    ("KEVIN_SANDBOX", "sandbox"),
    ("KEVIN_CLUSTER", "cluster"),
    ("KEVIN_OBSERVE", "observe"),
)

# environment variable -> BackendSettings field (earlier entries win for the same field)
ENV_VARS: tuple[tuple[str, str], ...] = (
    ("KEVIN_BACKEND", "backend"),
    ("KEVIN_MODEL", "model"),
    ("KEVIN_BASE_URL", "base_url"),
    ("KEVIN_API_KEY", "api_key"),
    ("OPENAI_API_KEY", "api_key"),
    ("KEVIN_SCRIPT", "script"),
    ("KEVIN_GPU", "target_gpu"),
)


@dataclass
class BackendSettings:
    """Which model to ask and how. Field names are also the config-file keys."""

    backend: str = "openai"  # "vllm" | "openai" | "scripted"
    model: str = DEFAULT_MODEL
    base_url: str | None = None  # default DEFAULT_BASE_URL (vllm serve)
    api_key: str | None = None  # from flag, env KEVIN_API_KEY / OPENAI_API_KEY, or config
    script: str | None = None  # scripted backend: file of recorded responses
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    temperature: float = 0.9
    max_tokens: int = 16384
    concurrency: int = 8
    timeout_s: float = 1800.0  # one request; long reasoning replies take minutes
    max_retries: int = 4  # on 429, 5xx and connection errors
    stream: bool = True  # stream replies (token counts for progress)
    target_gpu: str | None = None  # GPU named in the prompt when no device is visible

    @property
    def resolved_base_url(self) -> str:
        return self.base_url or DEFAULT_BASE_URL


class KevinConfig(dict):
    """The ``[tool.kevin]`` table; ``source`` is the file it came from (None: no file)."""

    def __init__(self, values: Mapping[str, Any] | None = None, source: Path | None = None):
        super().__init__(values or {})
        self.source = source


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        try:
            import tomli as tomllib
        except ImportError:
            print(f"kevin: ignoring {path}: reading TOML on Python 3.10 needs `pip install tomli`",
                  file=sys.stderr)
            return {}
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as err:
        raise UserInputError(f"{path}: not valid TOML: {err}") from None
    except OSError as err:
        raise UserInputError(f"{path}: cannot read: {err.strerror}") from None


def _config_dir(start: Path) -> Path:
    """The nearest folder at or above ``start`` holding kevin.toml, pyproject.toml or .git."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if any((folder / name).exists() for name in ("kevin.toml", "pyproject.toml", ".git")):
            return folder
    return start


def load_config(repo_root: Path | None = None) -> KevinConfig:
    """Read ``kevin.toml`` (whole file, or its [tool.kevin]) or else pyproject's [tool.kevin].

    ``repo_root`` None: search upward from the current directory. No file: an empty config.
    """
    folder = Path(repo_root) if repo_root is not None else _config_dir(Path.cwd())
    kevin_toml = folder / "kevin.toml"
    if kevin_toml.is_file():
        raw = _load_toml(kevin_toml)
        table = raw.get("tool", {}).get("kevin", raw) if isinstance(raw.get("tool"), dict) else raw
        return KevinConfig(_require_table(table, kevin_toml), kevin_toml)
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file():
        raw = _load_toml(pyproject)
        tool = raw.get("tool", {})
        if isinstance(tool, dict) and "kevin" in tool:
            return KevinConfig(_require_table(tool["kevin"], pyproject), pyproject)
    return KevinConfig()


def _require_table(value: Any, path: Path) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserInputError(f"{path}: [tool.kevin] must be a table")
    for key in value:
        if key not in known_keys():
            raise UserInputError(unknown_key_message(str(key), path))
    return value


# keys of [tool.kevin] owned by other modules: accept.plan.CONFIG_KEY, accept.apply.HOOKS_CONFIG_KEY
OTHER_KEYS = ("accept_dir", "run_hooks")
CACHE_MAX_KEY = "cache_max_gb"  # the build cache's size cap (past it, least recently used builds and headers go)
CACHE_MAX_VAR = "KEVIN_CACHE_MAX_GB"
DEFAULT_CACHE_MAX_GB = 5.0


def known_keys() -> tuple[str, ...]:
    """Every key [tool.kevin] / kevin.toml may hold: backend settings, evaluation settings, accept's."""
    backend = tuple(f.name for f in dataclasses.fields(BackendSettings))
    return backend + tuple(key for _, key in EVAL_ENV_VARS) + OTHER_KEYS + (CACHE_MAX_KEY,)


def unknown_key_message(key: str, path: Path) -> str:
    """One line naming the unknown key and the closest known one (a typo such as ``base_ur``)."""
    import difflib

    close = difflib.get_close_matches(key, known_keys(), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(known_keys()))}"
    return f"{path}: unknown key {key!r} in [tool.kevin] ({hint})"


_FIELDS = {f.name: f for f in dataclasses.fields(BackendSettings)}
_POSITIVE_INTS = {"tensor_parallel_size", "max_model_len", "max_tokens", "concurrency"}
_NON_NEGATIVE_INTS = {"max_retries"}
_FLOATS = {"temperature", "timeout_s"}
_BOOLS = {"stream"}


def _convert(key: str, value: Any) -> Any:
    """Check and convert one value; raises ValueError with the reason."""
    if value is None:
        return None
    if key in _POSITIVE_INTS or key in _NON_NEGATIVE_INTS:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError("expected a whole number")
        number = int(value)
        low = 1 if key in _POSITIVE_INTS else 0
        if number < low:
            raise ValueError(f"expected a whole number >= {low}")
        return number
    if key in _FLOATS:
        if isinstance(value, bool):
            raise ValueError("expected a number")
        real = float(value)
        if not math.isfinite(real) or real < 0 or (key == "timeout_s" and real == 0):
            raise ValueError("expected a positive number" if key == "timeout_s" else
                             "expected a number >= 0")
        return real
    if key in _BOOLS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    if key == "backend" and value not in BACKEND_NAMES:
        raise ValueError(f"expected one of {', '.join(BACKEND_NAMES)}")
    if key == "base_url" and not value.strip().startswith(("http://", "https://")):
        raise ValueError("expected a URL starting with http:// or https://")
    return value.strip()


def _apply(values: dict[str, Any], source: Mapping[str, Any], where: str) -> None:
    for key, raw in source.items():
        if key not in _FIELDS:
            continue  # other modules own other keys of [tool.kevin]
        if raw is None:
            continue
        try:
            values[key] = _convert(key, raw)
        except (ValueError, TypeError) as err:
            raise UserInputError(f"bad value for {key!r} in {where}: {raw!r} ({err})") from None


def resolve_backend_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
) -> BackendSettings:
    """Flags (None values ignored) > env > config file > defaults; UserInputError on a bad value."""
    values: dict[str, Any] = {}
    if config:
        source = getattr(config, "source", None)
        _apply(values, config, str(source) if source else "the config")
    for var, key in reversed(ENV_VARS):  # reversed: the first variable listed wins
        if env and env.get(var):
            _apply(values, {key: env[var]}, f"environment variable {var}")
    if flags:
        for key, raw in flags.items():
            if raw is not None:
                _apply(values, {key: raw}, f"option --{key.replace('_', '-')}")
    settings = BackendSettings(**values)
    if settings.backend == "scripted" and not settings.script:
        raise UserInputError("the scripted backend needs a script file: --script FILE")
    return settings


def _eval_value(key: str, value: Any) -> Any:
    """Check one evaluation setting; raises ValueError with the reason."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    text = value.strip()
    if key == "policy":
        return parse_policy(text)
    if key == "sandbox":
        return parse_sandbox_mode(text)
    if key == "cluster" and text != "auto" and not text.startswith("ray://"):
        raise ValueError("expected 'auto' or a Ray address such as ray://head:10001")
    if key == "observe":
        return parse_switch(text)
    return text


def parse_switch(text: str) -> bool:
    """on/off in the usual spellings; ValueError otherwise."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "on", "yes"):
        return True
    if lowered in ("0", "false", "off", "no"):
        return False
    raise ValueError("expected on or off (1/0, true/false)")


def resolve_eval_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The evaluation settings (policy, sandbox, cluster) that differ from the defaults:
    flags (None ignored) > env > config file; UserInputError naming a bad value."""
    values: dict[str, Any] = {}
    sources: list[tuple[Mapping[str, Any], str]] = []
    if config:
        source = getattr(config, "source", None)
        sources.append((config, str(source) if source else "the config"))
    for var, key in EVAL_ENV_VARS:
        if env and env.get(var):
            sources.append(({key: env[var]}, f"environment variable {var}"))
    if flags:
        sources += [({k: v}, f"option --{k.replace('_', '-')}") for k, v in flags.items() if v is not None]
    for source, where in sources:
        for key, raw in source.items():
            if key in ("policy", "sandbox", "cluster", "observe") and raw is not None:
                try:
                    values[key] = _eval_value(key, raw)
                except ValueError as err:
                    raise UserInputError(f"bad value for {key!r} in {where}: {raw!r} ({err})") from None
    return values


def cache_max_bytes(config: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> int:
    """The build cache's cap in bytes: KEVIN_CACHE_MAX_GB > ``cache_max_gb`` in [tool.kevin] >
    DEFAULT_CACHE_MAX_GB; UserInputError naming a value that is not a number of GB above 0."""
    env = os.environ if env is None else env
    config = load_config() if config is None else config
    value, where = config.get(CACHE_MAX_KEY, DEFAULT_CACHE_MAX_GB), "the config"
    if env.get(CACHE_MAX_VAR):
        value, where = env[CACHE_MAX_VAR], f"environment variable {CACHE_MAX_VAR}"
    try:
        gigabytes = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        gigabytes = float("nan")
    if not (math.isfinite(gigabytes) and gigabytes > 0):
        raise UserInputError(f"bad value for {CACHE_MAX_KEY!r} in {where}: {value!r} (expected a number of GB above 0)")
    return int(gigabytes * 1e9)
