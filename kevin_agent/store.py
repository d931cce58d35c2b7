"""The run store: SQLite (WAL) in ``.kevin/runs.sqlite`` at the repository root.

Every row is written when its event happens (run created, candidate generated, verdict ready,
status changed), so a killed process loses at most the candidate in flight. One connection guarded
by a lock: the LSP and the TUI call from worker threads.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

from kevin_agent.data import Candidate, Message, Task, Verdict
from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.paths import find_repo_root
from kevin_agent.run_record import RunRecord, RunStatus, RunSummary, parse_run_status

__all__ = ["RunStore", "RunRecord", "RunSummary", "find_repo_root", "now_iso"]

STORE_DIR = ".kevin"
STORE_FILE = "runs.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    class_name TEXT NOT NULL,
    source_path TEXT NOT NULL DEFAULT '',
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    settings_json TEXT NOT NULL,
    task_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS candidates (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    candidate_id TEXT NOT NULL,
    trajectory INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    parent_id TEXT,
    messages_json TEXT NOT NULL,
    response TEXT NOT NULL,
    reasoning TEXT NOT NULL,
    code TEXT,
    summary TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    finish_reason TEXT NOT NULL,
    parse_error TEXT,
    created TEXT NOT NULL,
    PRIMARY KEY (run_id, candidate_id)
);
CREATE TABLE IF NOT EXISTS verdicts (
    run_id TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    ok INTEGER NOT NULL,
    speedup REAL NOT NULL,
    counts_as_best INTEGER NOT NULL,
    verdict_json TEXT NOT NULL,
    created TEXT NOT NULL,
    PRIMARY KEY (run_id, candidate_id)
);
"""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())


class RunStore:
    """Runs, candidates and verdicts in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
            self._migrate()
        except (OSError, sqlite3.Error) as err:
            raise EnvironmentProblem(f"cannot open the run store {self.path}: {err}") from None

    @classmethod
    def for_path(cls, start: Path) -> RunStore:
        """The store at the repository root above ``start`` (``start`` itself when not in a repo)."""
        start = Path(start)
        root = find_repo_root(start)
        if root is None:
            root = start.resolve() if start.is_dir() else start.resolve().parent
        kevin_dir = root / STORE_DIR
        if not kevin_dir.exists():
            try:
                kevin_dir.mkdir(parents=True)
                (kevin_dir / ".gitignore").write_text("*\n")
            except OSError as err:
                raise EnvironmentProblem(f"cannot create {kevin_dir}: {err}") from None
        return cls(kevin_dir / STORE_FILE)

    def _migrate(self) -> None:
        """Columns added since a store was created (older stores open unchanged otherwise)."""
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(runs)")}
        if "notes_json" not in columns:
            self._conn.execute("ALTER TABLE runs ADD COLUMN notes_json TEXT NOT NULL DEFAULT '[]'")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------

    def _write(self, sql: str, params: Sequence[Any]) -> None:
        with self._lock, self._errors():
            self._conn.execute(sql, params)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """A database failure (locked, disk full, corrupt file) as a one-line EnvironmentProblem."""
        try:
            yield
        except sqlite3.Error as err:
            raise EnvironmentProblem(f"the run store {self.path} failed: {err}") from None

    def create_run(self, run_id: str, task: Task, settings: dict[str, Any]) -> None:
        stamp = now_iso()
        origin_path = task.origin.path if task.origin else ""
        self._write(
            "INSERT INTO runs (run_id, class_name, source_path, created, updated, status, "
            "settings_json, task_json) VALUES (?, ?, ?, ?, ?, 'running', ?, ?)",
            (run_id, task.class_name, origin_path, stamp, stamp, json.dumps(settings),
             json.dumps(task.to_dict())),
        )

    def add_notes(self, run_id: str, notes: Sequence[str]) -> None:
        """Append notes for the user (shown with the run's conclusion)."""
        with self._lock, self._errors():
            row = self._conn.execute("SELECT notes_json FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            kept = json.loads(row[0]) if row and row[0] else []
            self._conn.execute("UPDATE runs SET notes_json = ? WHERE run_id = ?",
                               (json.dumps(kept + list(notes)), run_id))

    def _status(self, text: object) -> RunStatus:
        """A stored status read back; one line naming the store when it is none we know."""
        try:
            return parse_run_status(text)
        except ValueError as err:
            raise EnvironmentProblem(f"the run store {self.path} holds {err}") from None

    def set_status(self, run_id: str, status: RunStatus, error: Optional[str] = None) -> None:
        parse_run_status(status)  # a caller outside the type checker's sight
        self._write(
            "UPDATE runs SET status = ?, error = ?, updated = ? WHERE run_id = ?",
            (status, error, now_iso(), run_id),
        )

    def add_candidate(
        self,
        run_id: str,
        candidate: Candidate,
        messages: Sequence[Message],
        parent_id: Optional[str] = None,
    ) -> None:
        """Store a generated candidate (replacing one with the same id: a redone turn)."""
        sent = [{"role": m.role, "content": m.content} for m in messages]
        with self._lock, self._errors():
            self._conn.execute(
                "DELETE FROM verdicts WHERE run_id = ? AND candidate_id = ?", (run_id, candidate.id)
            )
            self._conn.execute(
                "INSERT OR REPLACE INTO candidates (run_id, candidate_id, trajectory, turn, "
                "parent_id, messages_json, response, reasoning, code, summary, tokens, "
                "finish_reason, parse_error, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, candidate.id, candidate.trajectory, candidate.turn, parent_id,
                 json.dumps(sent), candidate.response, candidate.reasoning, candidate.code,
                 candidate.summary, candidate.tokens, candidate.finish_reason,
                 candidate.parse_error, now_iso()),
            )
            self._conn.execute("UPDATE runs SET updated = ? WHERE run_id = ?", (now_iso(), run_id))

    def add_verdict(self, run_id: str, candidate_id: str, verdict: Verdict) -> None:
        self._write(
            "INSERT OR REPLACE INTO verdicts (run_id, candidate_id, stage, ok, speedup, "
            "counts_as_best, verdict_json, created) VALUES (?,?,?,?,?,?,?,?)",
            (run_id, candidate_id, verdict.stage.value, int(verdict.ok), verdict.speedup,
             int(verdict.counts_as_best), json.dumps(verdict.to_dict()), now_iso()),
        )

    # -- reading -------------------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock, self._errors():
            return list(self._conn.execute(sql, params).fetchall())

    def list_runs(self) -> list[RunSummary]:
        """All runs, newest first."""
        rows = self._query(
            "SELECT r.run_id, r.class_name, r.created, r.status, r.source_path, "
            "(SELECT MAX(v.speedup) FROM verdicts v WHERE v.run_id = r.run_id "
            " AND v.counts_as_best = 1), "
            "(SELECT COUNT(*) FROM candidates c WHERE c.run_id = r.run_id), "
            "COALESCE(json_extract(r.settings_json, '$.evaluator'), '') LIKE 'replay:%' "
            "FROM runs r ORDER BY r.created DESC, r.rowid DESC"
        )
        return [
            RunSummary(run_id=r[0], class_name=r[1], created=r[2], status=self._status(r[3]), source_path=r[4],
                       best_speedup=r[5], candidates=r[6], replayed=bool(r[7]))
            for r in rows
        ]

    def resolve_run_id(self, run_id: str) -> str:
        """``latest`` or a unique prefix -> the full run id; UserInputError when unknown."""
        if run_id == "latest":
            rows = self._query("SELECT run_id FROM runs ORDER BY created DESC, rowid DESC LIMIT 1")
            if not rows:
                raise UserInputError("no runs stored yet; start one with `kevin optimize FILE.py::Class`")
            return str(rows[0][0])
        rows = self._query("SELECT run_id FROM runs WHERE run_id = ?", (run_id,))
        if rows:
            return str(rows[0][0])
        prefixed = self._query(
            "SELECT run_id FROM runs WHERE substr(run_id, 1, ?) = ?", (len(run_id), run_id)
        )
        if len(prefixed) == 1:
            return str(prefixed[0][0])
        if prefixed:
            shown = ", ".join(sorted(str(r[0]) for r in prefixed)[:5])
            raise UserInputError(f"run {run_id!r} is ambiguous ({len(prefixed)} runs: {shown}"
                                 f"{', ...' if len(prefixed) > 5 else ''}): give more of the id; "
                                 "`kevin runs` lists the stored runs")
        raise UserInputError(f"no run {run_id!r} in {self.path}; `kevin runs` lists the stored runs")

    def load_run(self, run_id: str) -> RunRecord:
        """The run with all its candidates and verdicts; ``run_id`` may be ``latest``."""
        run_id = self.resolve_run_id(run_id)
        (row,) = self._query(
            "SELECT run_id, task_json, settings_json, status, created, updated, error, notes_json FROM runs "
            "WHERE run_id = ?", (run_id,)
        )
        rows = self._query(
            "SELECT c.candidate_id, c.trajectory, c.turn, c.parent_id, c.response, c.reasoning, "
            "c.code, c.summary, c.tokens, c.finish_reason, c.parse_error, v.verdict_json "
            "FROM candidates c LEFT JOIN verdicts v "
            "ON v.run_id = c.run_id AND v.candidate_id = c.candidate_id "
            "WHERE c.run_id = ? ORDER BY c.turn, c.trajectory", (run_id,)
        )
        candidates: list[tuple[Candidate, Optional[Verdict]]] = []
        parents: dict[str, Optional[str]] = {}
        for r in rows:
            candidate = Candidate(
                id=r[0], trajectory=r[1], turn=r[2], response=r[4], reasoning=r[5], code=r[6],
                summary=r[7], tokens=r[8], finish_reason=r[9], parse_error=r[10],
            )
            parents[candidate.id] = r[3]
            verdict = Verdict.from_dict(json.loads(r[11])) if r[11] else None
            candidates.append((candidate, verdict))
        return RunRecord(
            run_id=row[0], task=Task.from_dict(json.loads(row[1])), settings=json.loads(row[2]),
            status=self._status(row[3]), created=row[4], updated=row[5], error=row[6], candidates=candidates,
            parents=parents, notes=json.loads(row[7] or "[]"),
        )

    def load_messages(self, run_id: str) -> dict[str, list[Message]]:
        """The prompt messages sent for each candidate of a run (candidate id -> messages)."""
        run_id = self.resolve_run_id(run_id)
        rows = self._query(
            "SELECT candidate_id, messages_json FROM candidates WHERE run_id = ?", (run_id,)
        )
        return {
            r[0]: [Message(role=m["role"], content=m["content"]) for m in json.loads(r[1])]
            for r in rows
        }


def load_stored_run(run_id: str, start: Optional[Path] = None) -> RunRecord:
    """One stored run from the store above ``start`` (default: the current folder), store closed."""
    with RunStore.for_path(start or Path.cwd()) as store:
        return store.load_run(run_id)
