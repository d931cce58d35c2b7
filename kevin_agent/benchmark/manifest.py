"""A benchmark's plan and progress: ``.kevin/bench/<id>.json`` beside the run store.

It lists the tasks in order, the run settings every task's run uses, and the run id of each task
as soon as it is chosen (before the run starts), so a benchmark killed at any point resumes: done
runs are kept, interrupted ones are resumed, missing ones start. Written atomically.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from kevin_agent.atomic import write_text_atomically
from kevin_agent.errors import UserInputError

BENCH_FOLDER = "bench"


@dataclass
class PlannedTask:
    """One task of the benchmark: its file, level, the run that plays it, (re-judging recorded
    replies) the scripted backend's file of replies, and why it was skipped when it was."""

    name: str
    level: int
    path: str
    run_id: Optional[str] = None
    script: Optional[str] = None
    trajectories: Optional[int] = None  # re-judging: one per recorded reply of this task
    skipped: Optional[str] = None  # why its task file could not be loaded (not counted; retried on resume)


@dataclass
class Manifest:
    """What ``kevin bench`` plays, and how far it got."""

    bench_id: str
    created: str
    sources: list[str]
    run: dict[str, Any]  # trajectories, turns, backend_flags, eval_flags, evaluator, gpu_name
    tasks: list[PlannedTask] = field(default_factory=list)
    replies: Optional[str] = None  # the --replies file, when re-judging recorded output

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Manifest:
        tasks = [PlannedTask(**task) for task in raw.get("tasks", [])]
        return cls(raw["bench_id"], raw["created"], list(raw["sources"]), dict(raw["run"]), tasks,
                   raw.get("replies"))


def new_bench_id() -> str:
    return "b" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


class ManifestStore:
    """The benchmark files in a run store's folder (``.kevin/bench``)."""

    def __init__(self, kevin_dir: Path) -> None:
        self.folder = Path(kevin_dir) / BENCH_FOLDER

    def path(self, bench_id: str) -> Path:
        return self.folder / f"{bench_id}.json"

    def save(self, manifest: Manifest) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_text_atomically(self.path(manifest.bench_id), manifest.to_json())

    def ids(self) -> list[str]:
        """Stored benchmark ids, oldest first."""
        if not self.folder.is_dir():
            return []
        return sorted(p.stem for p in self.folder.glob("b*.json"))

    def resolve(self, wanted: str) -> str:
        """``latest``, a full id or a unique prefix -> the id; UserInputError otherwise."""
        ids = self.ids()
        if wanted == "latest" and ids:
            return ids[-1]
        matches = [i for i in ids if i.startswith(wanted)]
        if len(matches) == 1:
            return matches[0]
        known = ", ".join(ids[-5:]) or "none yet"
        raise UserInputError(f"no single benchmark matches {wanted!r} (recent: {known})")

    def load(self, wanted: str) -> Manifest:
        bench_id = self.resolve(wanted)
        try:
            return Manifest.from_dict(json.loads(self.path(bench_id).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserInputError(f"benchmark file {self.path(bench_id)} cannot be read: {err}") from None
