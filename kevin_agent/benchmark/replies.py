"""Re-judging recorded model output: ``--replies FILE.jsonl`` -> one scripted run per task.

Each line is a JSON object: ``{"task": PATH, "reply": TEXT}`` (a model's whole reply) or
``{"task": PATH, "candidate": FILE}`` (a finished answer file, judged as if the model had replied
with it in a fenced Python block). Relative paths are read from the JSONL file's folder. The
replies of one task become the trajectories of one run of one turn, played by the scripted
backend on the real evaluator: a corpus of kernels judged by what actually ran.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kevin_agent.errors import UserInputError


@dataclass(frozen=True)
class RecordedReply:
    task: Path
    text: str


def _reply_text(raw: dict[str, object], base: Path, where: str) -> str:
    if isinstance(raw.get("reply"), str):
        return str(raw["reply"])
    if isinstance(raw.get("candidate"), str):
        path = base / str(raw["candidate"])
        try:
            code = path.read_text(encoding="utf-8")
        except OSError as err:
            raise UserInputError(f"{where}: candidate file {path} cannot be read: {err.strerror}") from None
        return f"```python\n{code}\n```"
    raise UserInputError(f'{where}: needs "reply" (text) or "candidate" (a file) beside "task"')


def read_replies(path: Path) -> list[RecordedReply]:
    """Every line of the file; UserInputError naming the first bad line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise UserInputError(f"--replies {path}: cannot be read: {err.strerror}") from None
    base = Path(path).resolve().parent
    replies = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            raw = json.loads(line)
        except ValueError as err:
            raise UserInputError(f"{where}: not a JSON object: {err}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("task"), str):
            raise UserInputError(f'{where}: expected {{"task": PATH, "reply": TEXT}}')
        task = (base / raw["task"]).resolve()
        if not task.is_file():
            raise UserInputError(f"{where}: task file {task} not found")
        replies.append(RecordedReply(task, _reply_text(raw, base, where)))
    if not replies:
        raise UserInputError(f"--replies {path}: no replies in the file")
    return replies


def by_task(replies: list[RecordedReply]) -> dict[Path, list[str]]:
    """Reply texts grouped by task, in file order."""
    grouped: dict[Path, list[str]] = {}
    for reply in replies:
        grouped.setdefault(reply.task, []).append(reply.text)
    return grouped


def write_script(texts: list[str], path: Path) -> None:
    """The scripted backend's file: reply i answers trajectory i, turn 0."""
    responses = [{"trajectory": i, "turn": 0, "text": text} for i, text in enumerate(texts)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"responses": responses}, indent=1), encoding="utf-8")
