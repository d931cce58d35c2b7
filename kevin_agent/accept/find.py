"""``find_accepted``: read back an accepted kernel's header (for the editor's code lens)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.accept.names import ArtifactNames

_HEADER_LINE = re.compile(r"^#\s*kevin-([a-z-]+):\s*(.*?)\s*$")
HEADER_LINES = 40  # the header is at the top of the generated module


@dataclass
class AcceptedKernel:
    speedup_vs_eager: float
    speedup_vs_compile: Optional[float]
    gpu: str
    kernel_path: Path
    run_id: str
    module_path: Optional[Path] = None
    candidate_id: str = ""


def read_header(module_path: Path) -> dict[str, str]:
    """The ``# kevin-key: value`` lines at the top of a generated module."""
    try:
        with module_path.open(encoding="utf-8") as handle:
            head = [next(handle, "") for _ in range(HEADER_LINES)]
    except (OSError, UnicodeDecodeError):
        return {}
    found = {}
    for line in head:
        match = _HEADER_LINE.match(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _number(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _directories(repo_root: Path, source_path: Path) -> list[Path]:
    folders = [source_path.parent]
    try:
        from kevin_agent.accept.plan import CONFIG_KEY
        from kevin_agent.config import load_config

        configured = load_config(repo_root).get(CONFIG_KEY)
    except Exception:  # a broken config must not break the code lens
        configured = None
    if configured:
        folder = Path(str(configured))
        folders.append(folder if folder.is_absolute() else repo_root / folder)
    return folders


def find_accepted(repo_root: Path, source_path: Path, class_name: str) -> Optional[AcceptedKernel]:
    """The accepted kernel for ``class_name`` of ``source_path``, None when there is none."""
    repo_root, source_path = Path(repo_root).resolve(), Path(source_path).resolve()
    label = f"{Path(os.path.relpath(source_path, repo_root)).as_posix()}::{class_name}"
    for folder in _directories(repo_root, source_path):
        module = ArtifactNames(class_name, folder.resolve()).module_path
        header = read_header(module)
        if not header or header.get("source") not in (label, f"{source_path.name}::{class_name}"):
            continue
        kernels = [k.strip() for k in header.get("kernel", "").split(",") if k.strip() and k.strip() != "inline"]
        return AcceptedKernel(
            speedup_vs_eager=_number(header.get("speedup-vs-eager")) or 0.0,
            speedup_vs_compile=_number(header.get("speedup-vs-compile")),
            gpu=header.get("gpu", ""),
            kernel_path=module.parent / kernels[0] if kernels else module,
            run_id=header.get("run", ""),
            module_path=module,
            candidate_id=header.get("candidate", ""),
        )
    return None


def drop_in_origin(module_path: Path, class_name: str) -> Optional[str]:
    """``"models/block.py::FusedBlock"`` when ``class_name`` in ``module_path`` is the drop-in
    module written by accepting a kernel for that class (its ``# kevin-source:`` header names the
    original and the class is the original's name + "CUDA"); None for any other class."""
    source = read_header(Path(module_path)).get("source", "")
    _, sep, original = source.rpartition("::")
    if not sep or not original:
        return None
    return source if class_name == ArtifactNames(original, Path(module_path).parent).drop_in_class else None
