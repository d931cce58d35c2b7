"""Where a warm evaluator listens: one per evaluation settings, environment, repository and
kevin-agent code, in a private folder of the build cache. Standard library only."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.api import EvalSettings

IDLE_VAR = "KEVIN_EVAL_DAEMON_IDLE_S"
DEFAULT_IDLE_S = 300.0
SOCKET_PATH_LIMIT = 100  # bytes; a Unix socket's path holds 108 at most
# The variables that change what an evaluation finds or builds: a warm evaluator started under
# other values is another one. KEVIN_* variables count too (secrets excepted: they are not read).
KEYED_VARIABLES = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
                   "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST", "CC", "CXX",
                   "PYTHONPATH", "HOME", "VIRTUAL_ENV", "CONDA_PREFIX", "TMPDIR")


@dataclass(frozen=True)
class DaemonAddress:
    """A warm evaluator's files: its socket, the lock it holds while it lives, its log."""

    folder: Path
    key: str

    @property
    def socket(self) -> Path:
        return self.folder / f"{self.key}.sock"

    @property
    def lock(self) -> Path:
        return self.folder / f"{self.key}.lock"

    @property
    def log(self) -> Path:
        return self.folder / f"{self.key}.log"


def idle_seconds(environ: Optional[Mapping[str, str]] = None) -> float:
    """KEVIN_EVAL_DAEMON_IDLE_S (seconds a warm evaluator waits for the next request; 0 starts
    none), default 300; a value that is not a number >= 0 is a one-line UserInputError."""
    text = (os.environ if environ is None else environ).get(IDLE_VAR, "").strip()
    if not text:
        return DEFAULT_IDLE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise UserInputError(f"{IDLE_VAR}={text!r} is not a number of seconds >= 0 (0 keeps no warm evaluator)")
    return value


def code_fingerprint(package: Path) -> str:
    """What identifies this kevin-agent's code: every module's path, size and change time (an
    edited checkout gets a new warm evaluator, never an old one's code)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path.relative_to(package)}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def private_folder(folder: Path) -> bool:
    """Make ``folder`` (mode 0700, ours); False when it is not a plain folder of this user."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return False
        if info.st_mode & 0o077:
            os.chmod(folder, 0o700)
        return True
    except OSError:
        return False


def daemon_address(settings: EvalSettings, environ: Optional[Mapping[str, str]] = None,
                   cwd: Optional[Path] = None, package: Optional[Path] = None) -> Optional[DaemonAddress]:
    """The warm evaluator for these settings, or None where none is kept: idle time 0, a
    compile-only, fresh-baseline or cluster evaluation, a cache folder not safely ours, a socket
    path too long."""
    from kevin_agent.evaluate.build.cache import default_cache_root
    from kevin_agent.paths import find_repo_root

    env = os.environ if environ is None else environ
    if idle_seconds(env) == 0 or settings.compile_only or settings.fresh_baselines or settings.cluster:
        return None
    cache = Path(settings.cache_dir or default_cache_root()).expanduser().absolute()
    folder = cache / "daemon"
    if not private_folder(folder):
        return None
    repository = find_repo_root(Path(cwd) if cwd is not None else Path.cwd())
    package = package or Path(__file__).resolve().parents[2]
    identity = {
        "settings": dataclasses.replace(settings, cache_dir=cache).to_dict(),
        "environment": {name: env.get(name) for name in sorted(env) if _keyed(name)},
        "python": sys.executable,
        "code": code_fingerprint(package),
        "repository": None if repository is None else str(repository),
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]
    address = DaemonAddress(folder, key)
    return address if len(os.fsencode(address.socket)) <= SOCKET_PATH_LIMIT else None


def _keyed(name: str) -> bool:
    from kevin_agent.evaluate.processes import is_secret_name

    return (name in KEYED_VARIABLES or name.startswith("KEVIN_")) and not is_secret_name(name) and name != IDLE_VAR
